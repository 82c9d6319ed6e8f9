package sessions

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/proto"
)

// Contexts as E2B has them: named sessions of a language beside its
// default one, with their own variables and working directory. The
// default sessions are made by use and cannot be created or deleted by
// name; named ones are made by a create (with a working directory) or by
// their first cell (in the sandbox's).

// CreateContext makes lang's context name, whose cells start in cwd (an
// absolute path to a directory; "" the sandbox's working directory). It
// starts no program: the first cell does. A name that exists (for
// JavaScript and TypeScript alike: they share their sessions) is
// ErrExists.
func (r *Registry) CreateContext(lang cell.Language, name, cwd string) (proto.ContextInfo, error) {
	if name == "" || name == cell.DefaultContext {
		return proto.ContextInfo{}, fmt.Errorf("%w: %q is each language's own session, made by its first cell; name another", ErrInvalid, cell.DefaultContext)
	}
	if !cell.ValidContextName(name) {
		return proto.ContextInfo{}, fmt.Errorf("%w: context name %q", ErrInvalid, clip(name))
	}
	if cwd != "" {
		if !filepath.IsAbs(cwd) {
			return proto.ContextInfo{}, fmt.Errorf("%w: cwd %q is not an absolute path", ErrInvalid, clip(cwd))
		}
		cwd = filepath.Clean(cwd)
		if st, err := os.Stat(cwd); err != nil || !st.IsDir() {
			return proto.ContextInfo{}, fmt.Errorf("%w: cwd %q is not a directory", ErrInvalid, clip(cwd))
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := keyOf(lang, name)
	if r.closed {
		return proto.ContextInfo{}, ErrClosed
	}
	if _, ok := r.sessions[k]; ok {
		return proto.ContextInfo{}, fmt.Errorf("%w: %s context %q", ErrExists, firstLanguage(k.runtime), name)
	}
	e, err := r.getLocked(k, true, cwd)
	if err != nil {
		return proto.ContextInfo{}, err
	}
	return r.infoLocked(k, e), nil
}

// Contexts lists the sessions: every named one, and the default ones
// that a cell or a restart used; by language, then name.
func (r *Registry) Contexts() []proto.ContextInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []proto.ContextInfo
	for k, e := range r.sessions {
		if k.name == cell.DefaultContext && !e.used {
			continue
		}
		out = append(out, r.infoLocked(k, e))
	}
	order := map[string]int{}
	for i, l := range cell.Languages {
		order[string(l)] = i
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Language != out[j].Language {
			return order[out[i].Language] < order[out[j].Language]
		}
		return out[i].Name < out[j].Name
	})
	return out
}

func (r *Registry) infoLocked(k key, e *entry) proto.ContextInfo {
	return proto.ContextInfo{Language: string(e.lang), Name: k.name, Cwd: e.cwd, Running: e.s.Running()}
}

// DeleteContext ends lang's context name: its program and whatever its
// cells started are killed (a running cell ends lost), its files go. The
// default sessions are not deleted (ErrInvalid; restart one instead).
func (r *Registry) DeleteContext(lang cell.Language, name string) error {
	if name == "" || name == cell.DefaultContext {
		return fmt.Errorf("%w: the default %s session is not deleted; restart it instead", ErrInvalid, firstLanguage(lang.Runtime()))
	}
	r.mu.Lock()
	k := keyOf(lang, name)
	e, err := r.getLocked(k, false, "")
	if err == nil {
		delete(r.sessions, k)
	}
	r.mu.Unlock()
	if err != nil {
		return err
	}
	r.log.Info("sessions: context deleted", "runtime", k.runtime, "context", name)
	return r.closeEntry(e)
}

// closeEntry closes a session that is out of the map, and its run
// directory.
func (r *Registry) closeEntry(e *entry) error {
	err := e.s.Close()
	if e.runDir != "" {
		if rerr := os.RemoveAll(e.runDir); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
