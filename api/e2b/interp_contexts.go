package e2b

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// E2B's contexts are cellvm's sessions. The SDK names a context by its id
// alone (DELETE /contexts/ID, POST /contexts/ID/restart, runCode's
// context_id), while a cellvm session is a language and a name, so the id
// says both:
//
//   - "default" is Python's default session (the sandbox's interpreter);
//   - "javascript-default", "typescript-default", "bash-default" are the
//     other languages' default sessions (TypeScript's is JavaScript's, its
//     cells transpiled first);
//   - any other id is a named session's name. Those this front end makes
//     are "e2b-<py|js|ts|sh>-<12 hex digits>", the language in the name,
//     so a TypeScript context (a Node session, listed by the Manager as
//     JavaScript) keeps running TypeScript; a name made through cellvm's
//     own API is found in the Manager's list, with its language.

// interpLanguage reads a language as E2B names it: cellvm's names and
// aliases (cell.ParseLanguage), and "python3".
func interpLanguage(s string) (cell.Language, error) {
	if strings.EqualFold(strings.TrimSpace(s), "python3") {
		return cell.Python, nil
	}
	return cell.ParseLanguage(s)
}

// ctxRef is a context: a language and its session's name ("" for the
// language's default session).
type ctxRef struct {
	lang cell.Language
	name string
}

// session is the Manager's Session for c; Python's default one is the
// zero Session.
func (c ctxRef) session() sandbox.Session {
	s := sandbox.Session{Language: c.lang, Context: c.name}
	if c.lang == cell.Python {
		s.Language = ""
	}
	return s
}

// id is c's context id (see above).
func (c ctxRef) id() string {
	switch {
	case c.name != "":
		return c.name
	case c.lang == cell.Python:
		return interpContextID
	}
	return string(c.lang) + "-" + cell.DefaultContext
}

// e2bShort are the languages' tags in the names of contexts made here.
var e2bShort = map[cell.Language]string{cell.Python: "py", cell.JavaScript: "js", cell.TypeScript: "ts", cell.Bash: "sh"}

// newContextName makes a context's name: "e2b-ts-0123456789ab".
func newContextName(l cell.Language) string {
	b := make([]byte, 6)
	rand.Read(b)
	return "e2b-" + e2bShort[l] + "-" + hex.EncodeToString(b)
}

// madeHere is the language in a name newContextName made, if it is one.
func madeHere(name string) (cell.Language, bool) {
	for l, tag := range e2bShort {
		p := "e2b-" + tag + "-"
		if strings.HasPrefix(name, p) && len(name) == len(p)+12 {
			return l, true
		}
	}
	return "", false
}

// contextOf is the context of one of the Manager's sessions.
func contextOf(ci sandbox.ContextInfo) interpContext {
	c := ctxRef{lang: ci.Language, name: ci.Name}
	if c.lang == "" {
		c.lang = cell.Python
	}
	if c.name == cell.DefaultContext {
		c.name = ""
	}
	if l, ok := madeHere(c.name); ok {
		c.lang = l
	}
	cwd := ci.Cwd
	if cwd == "" {
		cwd = interpCwd
	}
	return interpContext{ID: c.id(), Language: string(c.lang), Cwd: cwd}
}

// resolveContext finds the context id names: a default one by its id, a
// named one in the Manager's list (so an unknown id is 404, not a new
// session). It answers an HTTP status and message when it fails.
func resolveContext(s scope, r *http.Request, id string) (ctxRef, int, string) {
	if id == interpContextID {
		return ctxRef{lang: cell.Python}, 0, ""
	}
	for _, l := range cell.Languages {
		if l != cell.Python && id == string(l)+"-"+cell.DefaultContext {
			return ctxRef{lang: l}, 0, ""
		}
	}
	notFound := fmt.Sprintf("context %q not found", clipCaller(id))
	if !cell.ValidContextName(id) || id == cell.DefaultContext {
		return ctxRef{}, http.StatusNotFound, notFound
	}
	list, err := s.m.Contexts(r.Context(), s.id)
	if errors.Is(err, sandbox.ErrNotSupported) {
		return ctxRef{}, http.StatusNotFound, notFound + ": this cellvm has only the default contexts"
	}
	if err != nil {
		status, msg := interpStatus(err)
		return ctxRef{}, status, msg
	}
	for _, ci := range list {
		if ci.Name == id {
			c := ctxRef{lang: ci.Language, name: id}
			if l, ok := madeHere(id); ok {
				c.lang = l
			}
			return c, 0, ""
		}
	}
	return ctxRef{}, http.StatusNotFound, notFound
}

// interpListContexts answers GET /contexts: Python's default context
// always (the sandbox's interpreter runs from its start), then every other
// session the Manager has.
func interpListContexts(s scope, w http.ResponseWriter, r *http.Request) {
	list, err := s.m.Contexts(r.Context(), s.id)
	if err != nil && !errors.Is(err, sandbox.ErrNotSupported) {
		status, msg := interpStatus(err)
		interpError(w, status, msg)
		return
	}
	out := []interpContext{interpDefault()}
	for _, ci := range list {
		c := contextOf(ci)
		if c.ID != interpContextID {
			out = append(out, c)
		}
	}
	interpJSON(w, http.StatusOK, out)
}

// interpCreateContext answers POST /contexts {language, cwd}: a named
// session of the language, whose program starts with its first cell.
func interpCreateContext(s scope, w http.ResponseWriter, r *http.Request) {
	var req struct {
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
	}
	if err := interpDecode(r, 64<<10, &req); err != nil {
		interpError(w, http.StatusBadRequest, err.Error())
		return
	}
	l, err := interpLanguage(req.Language)
	if err != nil {
		interpError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.Cwd != "" && (!strings.HasPrefix(req.Cwd, "/") || len(req.Cwd) > 4096) {
		interpError(w, http.StatusBadRequest, fmt.Sprintf("cwd %q: an absolute path in the sandbox", clipCaller(req.Cwd)))
		return
	}
	name := newContextName(l)
	ci, err := s.m.CreateContext(r.Context(), s.id, sandbox.ContextSpec{Language: l, Name: name, Cwd: req.Cwd})
	if err != nil {
		status, msg := interpStatus(err)
		interpError(w, status, msg)
		return
	}
	ci.Name, ci.Language = name, l
	if ci.Cwd == "" {
		ci.Cwd = req.Cwd
	}
	interpJSON(w, http.StatusOK, contextOf(ci))
}

// interpContextOp answers DELETE /contexts/ID and POST /contexts/ID/restart.
func interpContextOp(s scope, w http.ResponseWriter, r *http.Request, rest string) {
	id, op, _ := strings.Cut(rest, "/")
	if op != "" && op != "restart" {
		interpError(w, http.StatusNotFound, "no such code interpreter route: /contexts/"+clipCaller(rest))
		return
	}
	switch {
	case op == "restart" && r.Method == http.MethodPost, op == "" && r.Method == http.MethodDelete:
	default:
		interpError(w, http.StatusMethodNotAllowed, "use DELETE /contexts/ID or POST /contexts/ID/restart")
		return
	}
	c, status, msg := resolveContext(s, r, id)
	if status != 0 {
		interpError(w, status, msg)
		return
	}
	var err error
	if op == "restart" {
		err = s.m.Restart(r.Context(), s.id, c.session())
	} else if c.name == "" {
		interpError(w, http.StatusNotImplemented, fmt.Sprintf("removing the context %q is not supported by cellvm: it is %s's default session (restart it instead)", id, c.lang))
		return
	} else {
		err = s.m.DeleteContext(r.Context(), s.id, c.session())
	}
	if err != nil {
		status, msg := interpStatus(err)
		interpError(w, status, msg)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
