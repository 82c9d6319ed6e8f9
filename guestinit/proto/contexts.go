package proto

import (
	"errors"
	"fmt"

	"github.com/cellvm/cellvm/cell"
)

// Sessions and contexts.
//
// Each language's cells run in a persistent session in the guest (the
// Python interpreter, a Node.js process for JavaScript and TypeScript, a
// Bash shell), started on first use. A session is picked by its language
// and a context name: "" (cell.DefaultContext) is each language's default
// session, and named ones are further sessions of that language with
// their own variables and working directory (E2B's contexts). OpRun
// creates the session it names; OpContext creates one with its own
// working directory, lists them, or deletes one.

// Context actions.
const (
	ContextCreate = "create"
	ContextList   = "list"
	ContextDelete = "delete"
)

// ContextOp is the op of an OpContext request.
type ContextOp struct {
	Action string `json:"action"`
	// Language and Name pick the session (create, delete). Create with an
	// empty Name is an error: the default sessions are created by use.
	Language string `json:"language,omitempty"`
	Name     string `json:"name,omitempty"`
	// Cwd is a created session's working directory ("" the sandbox's).
	Cwd string `json:"cwd,omitempty"`
}

// Validate implements Validator.
func (o *ContextOp) Validate() error {
	switch o.Action {
	case ContextList:
		if o.Language != "" || o.Name != "" || o.Cwd != "" {
			return errors.New("context list takes no arguments")
		}
		return nil
	case ContextCreate, ContextDelete:
		if o.Name == "" {
			return fmt.Errorf("context %s without a name", o.Action)
		}
		if err := checkSession(o.Language, o.Name); err != nil {
			return err
		}
		if o.Action == ContextDelete && o.Cwd != "" {
			return errors.New("context delete takes no cwd")
		}
		if o.Cwd != "" {
			return CheckPath(o.Cwd)
		}
		return nil
	}
	return fmt.Errorf("unknown context action %q", truncate(o.Action, 32))
}

// ContextInfo is a session that exists in the guest (it may not have
// started its program yet).
type ContextInfo struct {
	Language string `json:"language"`
	Name     string `json:"name"`
	Cwd      string `json:"cwd,omitempty"`
	// Running: its program runs now (a default session is listed only
	// once it was used).
	Running bool `json:"running"`
}

func validateContexts(cs []ContextInfo) error {
	if len(cs) > cell.MaxContexts*len(cell.Languages) {
		return fmt.Errorf("%d contexts (max %d)", len(cs), cell.MaxContexts)
	}
	for i := range cs {
		if err := checkSession(cs[i].Language, cs[i].Name); err != nil {
			return err
		}
		if err := checkText("cwd", cs[i].Cwd, MaxPathBytes); err != nil {
			return err
		}
	}
	return nil
}

// checkSession checks a session's language and context name.
func checkSession(lang, ctxName string) error {
	if _, err := cell.ParseLanguage(lang); err != nil {
		return err
	}
	if ctxName != "" && !cell.ValidContextName(ctxName) {
		return fmt.Errorf("context name %q: 1 to %d of [A-Za-z0-9._-], not starting with '.' or '-'", truncate(ctxName, 80), cell.MaxContextNameBytes)
	}
	return nil
}
