package sandbox

import (
	"fmt"
	"time"
)

// A sandbox's lifetimes: its TTL (it ends that long after its creation)
// and its idle timeout (it ends after that long without a call).
//
// A sandbox someone forgot must go by itself, so a manager gives every
// sandbox whose request names no lifetime the operator's default (serve
// --default-ttl and --default-idle-timeout), and the operator can cap the
// TTL (--max-ttl). A caller must still be able to ask for none at all
// where the operator allows it, so "not said" and "never" are two values:
//
//	Config  TTL 0       wire: ttl_s absent   the manager's default
//	Config  TTL Never   wire: ttl_s 0        none
//	Config  TTL n       wire: ttl_s n/1s     n
//
// and the same for IdleTimeout and idle_timeout_s. A created sandbox's
// Config holds what applies (Never or n, never 0), so Info shows it and a
// config saved by an older cellvm, where ttl_s 0 meant none, reads back
// with the same meaning.
//
// MaxTTL bounds the TTL only: with a cap, every sandbox has a TTL at most
// the cap, which ends it whatever its idle timeout, so an idle timeout of
// Never, or one longer than the TTL, is harmless and is not refused.

// Never, as a Config's TTL or IdleTimeout, asks for none: the sandbox
// lives until it is deleted (or, for IdleTimeout, until its TTL).
const Never time.Duration = -1

// Lifetimes are a manager's defaults and cap for sandboxes' lifetimes
// (see WithLifetimes).
type Lifetimes struct {
	// DefaultTTL and DefaultIdleTimeout are given to a sandbox whose
	// Config leaves them 0; 0 here means none (Never).
	DefaultTTL         time.Duration
	DefaultIdleTimeout time.Duration
	// MaxTTL caps the TTL a sandbox may have (0: no cap). Under a cap,
	// a TTL above it or Never is refused.
	MaxTTL time.Duration
}

// Validate checks the defaults and the cap: each 0 or 1 s to MaxTTL in
// whole seconds, and, under a cap, a default TTL at most the cap (a
// default of none under a cap would refuse every create that names no
// TTL). Its errors name the serve flags.
func (l Lifetimes) Validate() error {
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--default-ttl", l.DefaultTTL}, {"--default-idle-timeout", l.DefaultIdleTimeout}, {"--max-ttl", l.MaxTTL}} {
		switch {
		case d.v < 0:
			return fmt.Errorf("%s %v is negative (0 means none)", d.flag, d.v)
		case d.v%time.Second != 0:
			return fmt.Errorf("%s %v: give whole seconds", d.flag, d.v)
		case d.v > MaxTTL:
			return fmt.Errorf("%s %v is above the most a sandbox may live, %v", d.flag, d.v, MaxTTL)
		}
	}
	if l.MaxTTL > 0 && l.DefaultTTL == 0 {
		return fmt.Errorf("--default-ttl 0 (none) with --max-ttl %v: a create that names no TTL would be refused; give a default TTL up to the cap", l.MaxTTL)
	}
	if l.MaxTTL > 0 && l.DefaultTTL > l.MaxTTL {
		return fmt.Errorf("--default-ttl %v is above --max-ttl %v", l.DefaultTTL, l.MaxTTL)
	}
	return nil
}

// WithLifetimes returns c with a zero TTL and IdleTimeout replaced by l's
// defaults (Never where the default is none), or an error wrapping
// ErrInvalid when its TTL is past l's cap: above it, or Never. Every
// Manager calls it on a create, so each front end gets the same defaults.
func (c Config) WithLifetimes(l Lifetimes) (Config, error) {
	if c.TTL == 0 {
		c.TTL = orNever(l.DefaultTTL)
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = orNever(l.DefaultIdleTimeout)
	}
	if l.MaxTTL > 0 {
		capS := int64(l.MaxTTL / time.Second)
		switch {
		case c.TTL == Never:
			return c, fmt.Errorf("%w: ttl_s 0 (never): this daemon caps a sandbox's TTL at %d s (serve --max-ttl); give a ttl_s from 1 to %d, or none for the default",
				ErrInvalid, capS, capS)
		case c.TTL > l.MaxTTL:
			return c, fmt.Errorf("%w: ttl_s %d is above this daemon's cap of %d s (serve --max-ttl); give a ttl_s from 1 to %d, or none for the default",
				ErrInvalid, wholeSeconds(c.TTL), capS, capS)
		}
	}
	return c, nil
}

func orNever(d time.Duration) time.Duration {
	if d == 0 {
		return Never
	}
	return d
}

// validLifetime checks a TTL or IdleTimeout: 0 (the default), Never, or
// 1 s to MaxTTL.
func validLifetime(field string, d time.Duration) error {
	if d == 0 || d == Never || d > 0 && d <= MaxTTL {
		return nil
	}
	return fmt.Errorf("%w: %s %d out of range 1..%d (0 means never; leave it out for the daemon's default)",
		ErrInvalid, field, wholeSeconds(d), int64(MaxTTL/time.Second))
}

// wholeSeconds is d in seconds, rounded down, for messages.
func wholeSeconds(d time.Duration) int64 { return int64(d / time.Second) }

// lifetimeToWire is a TTL's or IdleTimeout's ttl_s: nil (absent) for 0,
// 0 for Never, else whole seconds, rounded away from zero when under a
// second so that no other value reads back as 0 or as the default.
func lifetimeToWire(d time.Duration) *int64 {
	var s int64
	switch {
	case d == 0:
		return nil
	case d == Never:
	case d > 0 && d < time.Second:
		s = 1
	case d < 0 && d > -time.Second:
		s = -1
	default:
		s = int64(d / time.Second)
	}
	return &s
}

// lifetimeFromWire reads ttl_s back: absent is 0 (the default), 0 is
// Never, else seconds (out of range clamped so that Validate refuses it).
func lifetimeFromWire(s *int64) time.Duration {
	switch {
	case s == nil:
		return 0
	case *s == 0:
		return Never
	}
	return secondsToDuration(*s)
}
