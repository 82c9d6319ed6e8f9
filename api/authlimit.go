package api

import (
	"container/list"
	"net/netip"
	"sync"
	"time"
)

// Failure rate limiting. Each client key (an IPv4 address, or an IPv6
// address's /64: one host is given a whole /64 and could otherwise mint a
// new address per guess) may fail authentication failBurst times at once
// and then once per failEvery; past that its failing requests get 429
// instead of 401. A request with a valid token never consults the table,
// so the limiter can slow guessing but can never lock out a token holder.
//
// The table holds at most maxFailClients keys. When it is full the least
// recently failing key is forgotten: an attacker who fills it with many
// addresses at worst resets other failing clients' allowances (his own
// included), and memory stays bounded whatever he sends.
const (
	failBurst      = 10
	failEvery      = 6 * time.Second
	maxFailClients = 4096
)

// failTable is a fixed-size LRU of token buckets, one per client key.
type failTable struct {
	burst float64
	every time.Duration
	size  int

	mu   sync.Mutex
	keys map[netip.Prefix]*list.Element
	lru  list.List // of *failEntry, most recent at the front
}

type failEntry struct {
	key    netip.Prefix
	tokens float64   // failures left, refilled at one per every
	at     time.Time // when tokens was computed
}

func newFailTable(burst int, every time.Duration, size int) *failTable {
	return &failTable{burst: float64(burst), every: every, size: size, keys: make(map[netip.Prefix]*list.Element, size)}
}

// spend takes one failure from key's allowance. It reports whether there
// was one left and, when there was not, how long until there is.
func (t *failTable) spend(key netip.Prefix, now time.Time) (ok bool, retry time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var e *failEntry
	if el := t.keys[key]; el != nil {
		e = el.Value.(*failEntry)
		t.lru.MoveToFront(el)
		if d := now.Sub(e.at); d > 0 {
			e.tokens = min(t.burst, e.tokens+float64(d)/float64(t.every))
		}
		e.at = now
	} else {
		if t.lru.Len() >= t.size {
			old := t.lru.Back()
			t.lru.Remove(old)
			delete(t.keys, old.Value.(*failEntry).key)
		}
		e = &failEntry{key: key, tokens: t.burst, at: now}
		t.keys[key] = t.lru.PushFront(e)
	}
	if e.tokens >= 1 {
		e.tokens--
		return true, 0
	}
	return false, time.Duration((1 - e.tokens) * float64(t.every))
}

// len is the number of keys held.
func (t *failTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lru.Len()
}

// failKey is the limiter's key for a client address: the address itself
// for IPv4 (an IPv4-mapped IPv6 address counts as IPv4), its /64 for IPv6.
// An address that does not parse shares the zero key with every other.
func failKey(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	switch {
	case a.Is4():
		return netip.PrefixFrom(a, 32)
	case a.Is6():
		p, _ := a.WithZone("").Prefix(64)
		return p
	}
	return netip.Prefix{}
}
