package sandbox

import (
	"fmt"
	"path"
	"strings"

	"github.com/cellvm/cellvm/cell"
)

// The checks of sessions and contexts, one for every Manager (the engine,
// the test double) and front end (the HTTP API, the E2B one), so they
// refuse the same things with the same words.

// Normalize checks s and spells it the one way managers keep it: its
// language's own name (aliases and case read, "" is Python) and its
// context's name ("" is cell.DefaultContext). Anything else is ErrInvalid
// naming what is allowed.
func (s Session) Normalize() (Session, error) {
	l, err := cell.ParseLanguage(string(s.Language))
	if err != nil {
		return Session{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	name := s.Context
	if name == "" {
		name = cell.DefaultContext
	}
	if !cell.ValidContextName(name) {
		return Session{}, fmt.Errorf("%w: context name %q: 1 to %d of [A-Za-z0-9._-], not starting with '.' or '-'", ErrInvalid, clip(name, 80), cell.MaxContextNameBytes)
	}
	return Session{Language: l, Context: name}, nil
}

// IsDefault reports whether s (normalized) is its language's default
// session.
func (s Session) IsDefault() bool { return s.Context == cell.DefaultContext }

// String names s for messages: "javascript context work".
func (s Session) String() string {
	l, name := s.Language, s.Context
	if l == "" {
		l = cell.Python
	}
	if name == "" {
		name = cell.DefaultContext
	}
	return fmt.Sprintf("%s context %s", l, name)
}

// Normalize checks spec as Session.Normalize does, leaving an empty Name
// empty (the manager makes one up); the default context cannot be
// created (its first cell does). Cwd must be an absolute guest path
// without NUL bytes, and is cleaned.
func (c ContextSpec) Normalize() (ContextSpec, error) {
	name := c.Name
	if name == cell.DefaultContext {
		return ContextSpec{}, fmt.Errorf("%w: %q is each language's default session, started by its first cell; name the context otherwise", ErrInvalid, name)
	}
	if name == "" {
		name = "x" // checks the language alone
	}
	s, err := Session{Language: c.Language, Context: name}.Normalize()
	if err != nil {
		return ContextSpec{}, err
	}
	out := ContextSpec{Language: s.Language, Name: c.Name}
	if c.Cwd != "" {
		if len(c.Cwd) > MaxGuestPathLen || strings.IndexByte(c.Cwd, 0) >= 0 || !path.IsAbs(c.Cwd) {
			return ContextSpec{}, fmt.Errorf("%w: a context's cwd is an absolute guest path of at most %d bytes without NUL bytes, not %q", ErrInvalid, MaxGuestPathLen, clip(c.Cwd, 128))
		}
		out.Cwd = path.Clean(c.Cwd)
	}
	return out, nil
}

// HasLanguage reports whether an image's languages (ImageInfo.Languages)
// allow l, and if not, an ErrInvalid naming those it has. No languages at
// all is an image whose languages are not known (recorded before they
// were): anything is allowed, and the guest says what is missing.
func HasLanguage(image string, langs []cell.LanguageInfo, l cell.Language) error {
	if len(langs) == 0 {
		return nil
	}
	names := make([]cell.Language, 0, len(langs))
	for _, li := range langs {
		if li.Name == l {
			return nil
		}
		names = append(names, li.Name)
	}
	return fmt.Errorf("%w: image %q has no %s; its languages are %s", ErrInvalid, clip(image, 64), l, cell.LanguageList(names))
}
