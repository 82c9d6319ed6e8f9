package cell

import (
	"fmt"
	"strings"
)

// Language is the language a cell is written in. Each language has its own
// persistent session in the sandbox (its own variables), started on first
// use; JavaScript and TypeScript share one Node.js session, TypeScript
// cells having their types stripped first.
type Language string

// The languages cells can be written in.
const (
	Python     Language = "python"
	JavaScript Language = "javascript"
	TypeScript Language = "typescript"
	Bash       Language = "bash"
)

// Languages lists every language cellvm knows, in the order it names them.
var Languages = []Language{Python, JavaScript, TypeScript, Bash}

// Runtime is the program whose session runs a language's cells: "python",
// "node" or "bash". Two languages with one runtime share a session (and
// its variables).
func (l Language) Runtime() string {
	switch l {
	case JavaScript, TypeScript:
		return "node"
	case Bash:
		return "bash"
	}
	return "python"
}

// aliases are the other names ParseLanguage takes (E2B's among them).
var aliases = map[string]Language{
	"":     Python,
	"py":   Python,
	"js":   JavaScript,
	"node": JavaScript,
	"ts":   TypeScript,
	"sh":   Bash,
}

// ParseLanguage reads a language's name or alias, case-insensitively: ""
// is Python. An unknown name is an error that lists the languages.
func ParseLanguage(s string) (Language, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	if l, ok := aliases[k]; ok {
		return l, nil
	}
	for _, l := range Languages {
		if string(l) == k {
			return l, nil
		}
	}
	return "", fmt.Errorf("unknown language %q: cells are %s", clipName(s), LanguageList(Languages))
}

// LanguageList names ls for a message: "python, javascript (js), ...".
func LanguageList(ls []Language) string {
	var b strings.Builder
	for i, l := range ls {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(l))
		switch l {
		case JavaScript:
			b.WriteString(" (js)")
		case TypeScript:
			b.WriteString(" (ts)")
		}
	}
	return b.String()
}

// LanguageInfo is a language an image has, and the version of the program
// that runs it (Python's, Node's, Bash's, or for TypeScript the
// transpiler's).
type LanguageInfo struct {
	Name    Language `json:"name"`
	Version string   `json:"version,omitempty"`
}

// DefaultContext is the name of each language's default session. Named
// sessions ("contexts", E2B's word) are others of the same language, with
// their own variables.
const DefaultContext = "default"

// MaxContextNameBytes bounds a context's name.
const MaxContextNameBytes = 64

// MaxContexts bounds the sessions of one sandbox, all languages together.
const MaxContexts = 16

// ValidContextName reports whether s may name a context: 1 to 64 of
// [A-Za-z0-9._-], not starting with '.' or '-'. "" means DefaultContext
// wherever a context is asked for.
func ValidContextName(s string) bool {
	if s == "" || len(s) > MaxContextNameBytes || s[0] == '.' || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func clipName(s string) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}
