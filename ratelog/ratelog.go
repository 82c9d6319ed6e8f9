// Package ratelog rate-limits the log lines a guest can trigger.
//
// A device that logs a warning for every malformed request hands a hostile
// guest a way to fill the host's disk (or, with the state directory on a
// tmpfs, its memory) at the rate it can post requests. So the VMM's
// devices log through a Handler that lets each message through at most
// Burst times at once and then once per Every, and counts what it held
// back: the next line of that message carries the count as "dropped", and
// Flush reports counts still pending (a device calls it when it closes).
//
// Lines are told apart by their message, which in this code base is a
// constant string per call site, so the state is bounded by the number of
// call sites; messages past MaxKeys share one bucket.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Defaults of Config.
const (
	DefaultBurst = 10
	DefaultEvery = time.Second
	// MaxKeys bounds the distinct messages tracked one by one.
	MaxKeys = 128
)

// DroppedKey is the attribute that carries how many lines of the same
// message were dropped before this one.
const DroppedKey = "dropped"

// Config says how much a Handler lets through. Zero fields take the
// defaults.
type Config struct {
	// Burst is how many lines of one message pass at once.
	Burst int
	// Every is how often one more line of a message may pass once its
	// burst is spent.
	Every time.Duration
	// Now is the clock (default time.Now); tests replace it.
	Now func() time.Time
}

// Handler is a slog.Handler that rate-limits by message and passes what it
// lets through to the next handler. Handlers derived with WithAttrs and
// WithGroup share their parent's limits.
type Handler struct {
	next slog.Handler
	st   *state
}

type state struct {
	cfg  Config
	mu   sync.Mutex
	keys map[string]*bucket
}

// bucket is a token bucket for one message, with the count of lines it
// dropped since the last one it let through.
type bucket struct {
	tokens  float64
	last    time.Time
	dropped uint64
}

// overflowKey is the shared bucket of messages past MaxKeys.
const overflowKey = "\x00overflow"

// New returns a Handler in front of next.
func New(next slog.Handler, cfg Config) *Handler {
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.Every <= 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Handler{next: next, st: &state{cfg: cfg, keys: map[string]*bucket{}}}
}

// Wrap returns a logger that writes through a Handler with the default
// limits in front of l's handler. A logger that is already rate-limited is
// returned as it is, so wrapping twice does not compound the limits. A nil
// l gives a logger that discards everything.
func Wrap(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	if _, ok := l.Handler().(*Handler); ok {
		return l
	}
	return slog.New(New(l.Handler(), Config{}))
}

// Flush logs, at Warn, one line per message that has dropped lines not yet
// reported, if l writes through a Handler; otherwise it does nothing.
func Flush(l *slog.Logger) {
	if l == nil {
		return
	}
	if h, ok := l.Handler().(*Handler); ok {
		h.Flush(context.Background())
	}
}

// Enabled implements slog.Handler.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle implements slog.Handler: it passes r on if r's message has a
// token left, with the count of lines dropped before it.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	ok, dropped := h.st.take(r.Message)
	if !ok {
		return nil
	}
	if dropped > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Uint64(DroppedKey, dropped))
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(attrs), st: h.st}
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), st: h.st}
}

// Flush logs one line per message with unreported drops and resets their
// counts.
func (h *Handler) Flush(ctx context.Context) {
	type pending struct {
		msg string
		n   uint64
	}
	var ps []pending
	h.st.mu.Lock()
	for k, b := range h.st.keys {
		if b.dropped > 0 {
			ps = append(ps, pending{k, b.dropped})
			b.dropped = 0
		}
	}
	h.st.mu.Unlock()
	for _, p := range ps {
		msg := p.msg
		if msg == overflowKey {
			msg = "(other messages)"
		}
		r := slog.NewRecord(h.st.cfg.Now(), slog.LevelWarn, "log lines dropped by the rate limit", 0)
		r.AddAttrs(slog.String("message", msg), slog.Uint64(DroppedKey, p.n))
		h.next.Handle(ctx, r)
	}
}

// take spends a token of msg's bucket. It reports whether the line may
// pass and, if so, how many were dropped before it.
func (s *state) take(msg string) (bool, uint64) {
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.keys[msg]
	if !ok {
		if len(s.keys) >= MaxKeys {
			msg = overflowKey
			b = s.keys[msg]
		}
		if b == nil {
			b = &bucket{tokens: float64(s.cfg.Burst), last: now}
			s.keys[msg] = b
		}
	}
	if el := now.Sub(b.last); el > 0 {
		b.tokens = min(float64(s.cfg.Burst), b.tokens+float64(el)/float64(s.cfg.Every))
		b.last = now
	}
	if b.tokens < 1 {
		b.dropped++
		return false, 0
	}
	b.tokens--
	d := b.dropped
	b.dropped = 0
	return true, d
}
