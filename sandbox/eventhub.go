package sandbox

import (
	"context"
	"io"
	"sync"
	"time"
)

// eventBuffer is how many events a subscriber may have unread before it is
// dropped with ErrEventsLagged: a slow reader must never hold up the
// manager that publishes.
const eventBuffer = 1024

// EventHub fans lifecycle events out to subscribers. Managers embed one;
// the zero value is ready to use.
type EventHub struct {
	mu   sync.Mutex
	seq  uint64
	subs map[*hubStream]struct{}
}

// Publish stamps e with the next sequence number (and the time, if unset)
// and hands it to every subscriber without blocking.
func (h *EventHub) Publish(e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	e.Seq = h.seq
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	for s := range h.subs {
		select {
		case s.ch <- e:
		default:
			s.lagged = true
			delete(h.subs, s)
			close(s.ch)
		}
	}
}

// Subscribe opens a stream of the events published from now on.
func (h *EventHub) Subscribe(ctx context.Context) (EventStream, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &hubStream{hub: h, ch: make(chan Event, eventBuffer)}
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[*hubStream]struct{}{}
	}
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	return s, nil
}

type hubStream struct {
	hub    *EventHub
	ch     chan Event
	lagged bool // set under hub.mu before ch is closed
}

func (s *hubStream) Next(ctx context.Context) (Event, error) {
	select {
	case e, ok := <-s.ch:
		if ok {
			return e, nil
		}
		s.hub.mu.Lock()
		lagged := s.lagged
		s.hub.mu.Unlock()
		if lagged {
			return Event{}, ErrEventsLagged
		}
		return Event{}, io.EOF
	case <-ctx.Done():
		return Event{}, ctx.Err()
	}
}

// Close ends the stream; it is idempotent.
func (s *hubStream) Close() error {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	if _, ok := s.hub.subs[s]; ok {
		delete(s.hub.subs, s)
		close(s.ch)
	}
	return nil
}
