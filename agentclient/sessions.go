package agentclient

import (
	"context"
	"fmt"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/proto"
)

// Session picks one of the guest's persistent sessions (proto's
// contexts.go): a language's default one, or a named context of it. The
// zero Session is Python's default session, the one a guest of any
// version has.
type Session struct {
	// Language is the session's language ("" is Python).
	Language cell.Language
	// Context names the session ("" or cell.DefaultContext: the
	// language's default one).
	Context string
}

// wire returns the request's language and context fields. Python's
// default session is sent as no fields at all, so that a guest that
// predates sessions (an image paused by an older cellvm) still takes the
// request.
func (s Session) wire() (lang, ctxName string) {
	if s.Language != cell.Python {
		lang = string(s.Language)
	}
	if s.Context != cell.DefaultContext {
		ctxName = s.Context
	}
	return lang, ctxName
}

// RestartSession gives session sess a fresh program; the guest's other
// sessions are untouched. A named context that does not exist is the
// guest's error.
func (c *Client) RestartSession(ctx context.Context, sess Session) error {
	lang, name := sess.wire()
	_, err := c.do(ctx, proto.Request{Op: proto.OpRestart, Language: lang, Context: name}, nil, nil)
	return err
}

// Contexts lists the guest's sessions.
func (c *Client) Contexts(ctx context.Context) ([]proto.ContextInfo, error) {
	return c.contextOp(ctx, proto.ContextOp{Action: proto.ContextList})
}

// CreateContext creates the named session sess (its Context must not be
// empty) with working directory cwd ("" the sandbox's); its program starts
// with its first cell.
func (c *Client) CreateContext(ctx context.Context, sess Session, cwd string) (proto.ContextInfo, error) {
	lang, name := sess.wire()
	op := proto.ContextOp{Action: proto.ContextCreate, Language: lang, Name: name, Cwd: cwd}
	cs, err := c.contextOp(ctx, op)
	if err != nil {
		return proto.ContextInfo{}, err
	}
	// The guest answers with the session it created. An answer that does
	// not name it is taken as what was asked for: the guest created it
	// (it did not say otherwise), and the host's list shows the truth.
	for _, ci := range cs {
		if ci.Name == sess.Context && sameRuntime(ci.Language, sess.Language) {
			return ci, nil
		}
	}
	return proto.ContextInfo{Language: string(sess.Language), Name: sess.Context, Cwd: cwd}, nil
}

// DeleteContext ends the named session sess and its program.
func (c *Client) DeleteContext(ctx context.Context, sess Session) error {
	lang, name := sess.wire()
	_, err := c.contextOp(ctx, proto.ContextOp{Action: proto.ContextDelete, Language: lang, Name: name})
	return err
}

// contextOp sends an OpContext request, checked first: the agent hangs up
// on a request it refuses.
func (c *Client) contextOp(ctx context.Context, op proto.ContextOp) ([]proto.ContextInfo, error) {
	if err := op.Validate(); err != nil {
		return nil, fmt.Errorf("agent %s: %w", proto.OpContext, err)
	}
	resp, err := c.do(ctx, proto.Request{Op: proto.OpContext, ContextOp: &op}, nil, nil)
	if err != nil {
		return nil, err
	}
	if resp.Result != nil || resp.Exec != nil || resp.Health != nil || resp.File != nil || resp.Files != nil ||
		resp.Proc != nil || resp.Written != nil || resp.Interrupted != nil || resp.Reseeded != nil {
		return nil, badAnswer(proto.OpContext, "an answer of another op")
	}
	return resp.Contexts, nil
}

// sameRuntime reports whether two language names (as the guest and the
// host spell them) have one session: JavaScript and TypeScript share one.
func sameRuntime(a string, b cell.Language) bool {
	la, err := cell.ParseLanguage(a)
	return err == nil && la.Runtime() == b.Runtime()
}
