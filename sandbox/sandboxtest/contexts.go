package sandboxtest

import (
	"context"
	"fmt"
	"maps"
	"sort"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// Sessions: each sandbox keeps one session per language and context, as
// the guest does, each with its own variables for the stand-in
// interpreter, so "Python's x and JavaScript's x are separate" shows over
// the double. JavaScript and TypeScript share their sessions. A session
// starts with its first cell (Python's default one is there from the
// start, but is listed only once used); CreateContext makes a named one
// with its cwd. A cell or a restart in a language the sandbox's image
// lacks (ImageInfo.Languages) is refused naming those it has; forks have
// their snapshot's sessions.

// session is one of a sandbox's sessions.
type session struct {
	vars map[string]int
	cwd  string
	// used: a cell ran in it (its program started).
	used bool
}

// sessions are a sandbox's, by key.
type sessions map[sandbox.Session]*session

// pythonDefault is the key of Python's default session.
var pythonDefault = sandbox.Session{Language: cell.Python, Context: cell.DefaultContext}

func newSessions() sessions {
	return sessions{pythonDefault: {vars: map[string]int{}}}
}

// clone copies every session, for a snapshot or a fork.
func (ss sessions) clone() sessions {
	out := make(sessions, len(ss))
	for k, s := range ss {
		c := *s
		c.vars = maps.Clone(s.vars)
		out[k] = &c
	}
	return out
}

// listed counts the sessions Contexts lists.
func (ss sessions) listed() int {
	n := 0
	for k, s := range ss {
		if s.used || !k.IsDefault() {
			n++
		}
	}
	return n
}

// sessionKey is the key of normalized session s: JavaScript and
// TypeScript share one.
func sessionKey(s sandbox.Session) sandbox.Session {
	if s.Language.Runtime() == cell.JavaScript.Runtime() {
		s.Language = cell.JavaScript
	}
	return s
}

// normalize checks a session as the VM manager does, against the image of
// b's sandbox too. The caller holds m.mu.
func (m *Manager) normalize(b *box, s sandbox.Session) (sandbox.Session, error) {
	s, err := s.Normalize()
	if err != nil {
		return s, err
	}
	return s, m.hasLanguage(b, s.Language)
}

// hasLanguage refuses a language the image of b's sandbox lacks. The
// caller holds m.mu.
func (m *Manager) hasLanguage(b *box, l cell.Language) error {
	img := imageOf(b.info.Config)
	return sandbox.HasLanguage(img, m.images[img].Languages, l)
}

// sessionFor returns the session a cell runs in, started if need be; past
// cell.MaxContexts it is the guest's refusal (ErrInvalid). The caller
// holds m.mu.
func (b *box) sessionFor(s sandbox.Session) (*session, error) {
	k := sessionKey(s)
	if ss := b.sessions[k]; ss != nil {
		return ss, nil
	}
	if b.sessions.listed() >= cell.MaxContexts {
		return nil, fmt.Errorf("%w: the sandbox has %d sessions, the most it may have", sandbox.ErrInvalid, cell.MaxContexts)
	}
	ss := &session{vars: map[string]int{}}
	b.sessions[k] = ss
	return ss, nil
}

// sessionSuffix is how Calls and Happened name a session other than
// Python's default one: " javascript/work".
func sessionSuffix(s sandbox.Session) string {
	if n, err := s.Normalize(); err == nil && n == pythonDefault {
		return ""
	}
	l, name := s.Language, s.Context
	if n, err := s.Normalize(); err == nil {
		l, name = n.Language, n.Context
	}
	return fmt.Sprintf(" %s/%s", l, name)
}

// Contexts implements sandbox.Manager.
func (m *Manager) Contexts(ctx context.Context, id string) ([]sandbox.ContextInfo, error) {
	if err := m.enter("Contexts", id); err != nil {
		return nil, err
	}
	var out []sandbox.ContextInfo
	err := m.withBox(id, func(b *box) error {
		for k, s := range b.sessions {
			if s.used || !k.IsDefault() {
				out = append(out, sandbox.ContextInfo{Language: k.Language, Name: k.Context, Cwd: s.cwd, Running: s.used})
			}
		}
		return nil
	})
	order := map[cell.Language]int{}
	for i, l := range cell.Languages {
		order[l] = i
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Language != out[j].Language {
			return order[out[i].Language] < order[out[j].Language]
		}
		if di, dj := out[i].Name == cell.DefaultContext, out[j].Name == cell.DefaultContext; di != dj {
			return di
		}
		return out[i].Name < out[j].Name
	})
	return out, err
}

// CreateContext implements sandbox.Manager.
func (m *Manager) CreateContext(ctx context.Context, id string, spec sandbox.ContextSpec) (sandbox.ContextInfo, error) {
	if err := m.enter("CreateContext", id, string(spec.Language), spec.Name); err != nil {
		return sandbox.ContextInfo{}, err
	}
	spec, err := spec.Normalize()
	if err != nil {
		return sandbox.ContextInfo{}, err
	}
	var info sandbox.ContextInfo
	err = m.withBox(id, func(b *box) error {
		if err := m.hasLanguage(b, spec.Language); err != nil {
			return err
		}
		if spec.Name == "" {
			b.contextsMade++
			spec.Name = fmt.Sprintf("ctx-%08x", b.contextsMade)
		}
		k := sessionKey(sandbox.Session{Language: spec.Language, Context: spec.Name})
		if b.sessions[k] != nil {
			return fmt.Errorf("%w: sandbox %s already has %s", sandbox.ErrInvalid, id, k)
		}
		if n := b.sessions.listed(); n >= cell.MaxContexts {
			return fmt.Errorf("%w: sandbox %s has %d sessions, the most it may have; delete a context first", sandbox.ErrQuota, id, n)
		}
		b.sessions[k] = &session{vars: map[string]int{}, cwd: spec.Cwd}
		info = sandbox.ContextInfo{Language: k.Language, Name: k.Context, Cwd: spec.Cwd}
		m.note("context %s create %s/%s", id, k.Language, k.Context)
		return nil
	})
	return info, err
}

// DeleteContext implements sandbox.Manager.
func (m *Manager) DeleteContext(ctx context.Context, id string, s sandbox.Session) error {
	if err := m.enter("DeleteContext", id, string(s.Language), s.Context); err != nil {
		return err
	}
	s, err := s.Normalize()
	if err != nil {
		return err
	}
	if s.IsDefault() {
		return fmt.Errorf("%w: %s is a default session, which is not deleted; restart it instead", sandbox.ErrInvalid, s)
	}
	return m.withBox(id, func(b *box) error {
		k := sessionKey(s)
		if b.sessions[k] == nil {
			return fmt.Errorf("%w: sandbox %s has no %s", sandbox.ErrNotFound, id, k)
		}
		delete(b.sessions, k)
		m.note("context %s delete %s/%s", id, k.Language, k.Context)
		return nil
	})
}
