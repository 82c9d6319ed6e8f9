// Package dnsname reads DNS names as DNS reads them: as a sequence of
// labels. A name in presentation format (what the resolver library hands
// over for a query, and what people type) can hide a dot inside a label
// behind an escape: "x\.example.com" is the two labels "x.example" and
// "com", a name under com and not under example.com, though as a string
// it ends in ".example.com". Comparing names as strings lets such a name
// through a wildcard; comparing labels does not.
package dnsname

import "strings"

// Limits of RFC 1035 (2.3.4).
const (
	MaxLabel = 63
	// MaxName is the longest name in presentation form without escapes
	// or the root's dot (255 bytes on the wire).
	MaxName = 253
)

// Labels returns the labels of a name in presentation format, with its
// escapes decoded ("\." a dot inside a label, "\DDD" the byte DDD, "\c"
// the character c), ASCII letters in lower case, and the root's empty
// label (a trailing dot) dropped. It reports false for a malformed name:
// an empty label, a bad escape, a label over 63 bytes or a name over 255
// bytes on the wire. The root itself (".") has no labels.
func Labels(name string) ([]string, bool) {
	if name == "." {
		return nil, true
	}
	var labels []string
	var cur []byte
	wire := 1 // the root's length byte
	end := func() bool {
		if len(cur) == 0 || len(cur) > MaxLabel {
			return false
		}
		wire += 1 + len(cur)
		labels = append(labels, string(cur))
		cur = cur[:0]
		return true
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '.':
			if !end() {
				return nil, false
			}
			continue
		case c == '\\':
			if i+1 >= len(name) {
				return nil, false
			}
			if isDigit(name[i+1]) {
				if i+3 >= len(name) || !isDigit(name[i+2]) || !isDigit(name[i+3]) {
					return nil, false
				}
				v := int(name[i+1]-'0')*100 + int(name[i+2]-'0')*10 + int(name[i+3]-'0')
				if v > 255 {
					return nil, false
				}
				c = byte(v)
				i += 3
			} else {
				c = name[i+1]
				i++
			}
		}
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		cur = append(cur, c)
	}
	if len(cur) > 0 && !end() {
		return nil, false
	}
	if len(labels) == 0 || wire > 255 {
		return nil, false
	}
	return labels, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// Host returns a name in presentation format as a host name, lower case,
// without a trailing dot, if every label is made of letters, digits, '-'
// and '_' only: the names a policy can list. A name with any other byte
// in a label (a dot, a space, a control character) is not one, and Host
// reports false for it and for a malformed name.
func Host(name string) (string, bool) {
	labels, ok := Labels(name)
	if !ok || len(labels) == 0 {
		return "", false
	}
	for _, l := range labels {
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", false
			}
		}
	}
	return strings.Join(labels, "."), true
}
