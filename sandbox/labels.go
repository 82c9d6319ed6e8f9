package sandbox

import (
	"fmt"
	"strings"
)

// Labels are a sandbox's key=value metadata (Config.Labels), E2B's
// metadata: a caller tags what it creates ("run=42", "user=alice") and
// finds it again by tag. They are the caller's own words, never read by
// cellvm, so they are bounded but not interpreted: keys are short
// printable names, values any UTF-8 text without control characters.

// Bounds on labels.
const (
	MaxLabels          = 64
	MaxLabelKeyBytes   = 128
	MaxLabelValueBytes = 1024
)

// ValidateLabels checks the count and each key and value.
func ValidateLabels(l map[string]string) error {
	if len(l) > MaxLabels {
		return fmt.Errorf("%w: labels has %d entries, at most %d", ErrInvalid, len(l), MaxLabels)
	}
	for k, v := range l {
		if k == "" || len(k) > MaxLabelKeyBytes || !labelKey(k) {
			return fmt.Errorf("%w: label key %q: 1..%d bytes of letters, digits and . _ - / :", ErrInvalid, clip(k, 64), MaxLabelKeyBytes)
		}
		if len(v) > MaxLabelValueBytes || !labelValue(v) {
			return fmt.Errorf("%w: label %q's value: at most %d bytes of UTF-8 text without control characters", ErrInvalid, clip(k, 64), MaxLabelValueBytes)
		}
	}
	return nil
}

func labelKey(k string) bool {
	for _, r := range k {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("._-/:", r):
		default:
			return false
		}
	}
	return true
}

func labelValue(v string) bool {
	for _, r := range v {
		if r < 0x20 || r == 0x7f || r == 0xfffd {
			return false
		}
	}
	return true
}

// ListFilter selects sandboxes by labels and state (front ends filter
// List's answer with it; E2B's list query and `cellvm sandbox ls -l`).
type ListFilter struct {
	// Labels must all be present with these values.
	Labels map[string]string
	// States, when not empty, are the states allowed.
	States []State
}

// Match reports whether i passes f.
func (f ListFilter) Match(i Info) bool {
	for k, v := range f.Labels {
		if got, ok := i.Config.Labels[k]; !ok || got != v {
			return false
		}
	}
	if len(f.States) == 0 {
		return true
	}
	for _, s := range f.States {
		if i.State == s {
			return true
		}
	}
	return false
}
