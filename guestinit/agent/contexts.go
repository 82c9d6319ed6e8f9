package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/proto"
	"github.com/cellvm/cellvm/guestinit/sessions"
)

// Sessions: a cell runs in the session of its language and context
// (package guestinit/sessions). An Interpreter that has sessions offers
// SessionRunner, and ContextKeeper for OpContext; one that has not (the
// tests' fakes, an agent before languages) runs Python's default session
// alone, and a cell of another session is refused as unsupported.

// SessionRunner is an Interpreter with a session per language and context
// (*sessions.Registry).
type SessionRunner interface {
	RunIn(ctx context.Context, lang cell.Language, contextName, code string, timeout time.Duration, onEvent func(cell.Event)) (cell.Result, error)
	RestartIn(lang cell.Language, contextName string) error
}

// ContextKeeper creates, lists and deletes named sessions
// (*sessions.Registry).
type ContextKeeper interface {
	CreateContext(lang cell.Language, name, cwd string) (proto.ContextInfo, error)
	Contexts() []proto.ContextInfo
	DeleteContext(lang cell.Language, name string) error
}

// errNoSessions: this agent's interpreter has Python's default session
// alone.
var errNoSessions = errors.New("this agent runs Python's default session only")

// isDefault reports whether a request's context names the default session.
func isDefault(name string) bool { return name == "" || name == cell.DefaultContext }

// sessionCode is the response code of a session error.
func sessionCode(err error) string {
	switch {
	case errors.Is(err, sessions.ErrNotFound):
		return proto.CodeNotFound
	case errors.Is(err, sessions.ErrExists):
		return proto.CodeExists
	case errors.Is(err, sessions.ErrFull):
		return proto.CodeFull
	case errors.Is(err, sessions.ErrInvalid):
		return proto.CodeBadRequest
	case errors.Is(err, errNoSessions):
		return proto.CodeUnsupported
	}
	return proto.CodeInterp
}

// runCell runs req's cell in its session. The request was validated: its
// language parses.
func (ss *session) runCell(ctx context.Context, req *proto.Request, onEvent func(cell.Event)) (cell.Result, error) {
	lang, err := cell.ParseLanguage(req.Language)
	if err != nil {
		return cell.Result{}, fmt.Errorf("%w: %v", sessions.ErrInvalid, err)
	}
	timeout := time.Duration(req.TimeoutMS) * time.Millisecond
	if sr, ok := ss.s.cfg.Interp.(SessionRunner); ok {
		return sr.RunIn(ctx, lang, req.Context, req.Code, timeout, onEvent)
	}
	if lang != cell.Python || !isDefault(req.Context) {
		return cell.Result{}, errNoSessions
	}
	return ss.s.cfg.Interp.Run(ctx, req.Code, timeout, onEvent)
}

func (ss *session) restart(req *proto.Request) bool {
	lang, err := cell.ParseLanguage(req.Language)
	if err != nil {
		return ss.reply(errResponse(proto.CodeBadRequest, err))
	}
	if sr, ok := ss.s.cfg.Interp.(SessionRunner); ok {
		err = sr.RestartIn(lang, req.Context)
	} else if lang != cell.Python || !isDefault(req.Context) {
		err = errNoSessions
	} else {
		err = ss.s.cfg.Interp.Restart()
	}
	if err != nil {
		return ss.reply(errResponse(sessionCode(err), err))
	}
	return ss.reply(proto.Response{})
}

// contextOp serves OpContext. The request was validated (proto's
// ContextOp.Validate: the action, the language, the name, the cwd's form).
func (ss *session) contextOp(req *proto.Request) bool {
	ck, ok := ss.s.cfg.Interp.(ContextKeeper)
	if !ok {
		return ss.reply(errResponse(proto.CodeUnsupported, errors.New("this agent has no contexts")))
	}
	op := req.ContextOp
	if op.Action == proto.ContextList {
		// An empty list is an empty response (the field is omitted).
		return ss.reply(proto.Response{Contexts: ck.Contexts()})
	}
	lang, err := cell.ParseLanguage(op.Language)
	if err != nil {
		return ss.reply(errResponse(proto.CodeBadRequest, err))
	}
	switch op.Action {
	case proto.ContextCreate:
		info, err := ck.CreateContext(lang, op.Name, op.Cwd)
		if err != nil {
			return ss.reply(errResponse(sessionCode(err), err))
		}
		return ss.reply(proto.Response{Contexts: []proto.ContextInfo{info}})
	case proto.ContextDelete:
		if err := ck.DeleteContext(lang, op.Name); err != nil {
			return ss.reply(errResponse(sessionCode(err), err))
		}
		return ss.reply(proto.Response{})
	}
	return ss.reply(errResponse(proto.CodeBadRequest, fmt.Errorf("unknown context action %q", op.Action)))
}
