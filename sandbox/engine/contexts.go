package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/cellvm/cellvm/agentclient"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/proto"
	"github.com/cellvm/cellvm/sandbox"
)

// Sessions and contexts. Each language's cells run in a session in the
// guest (proto's contexts.go), kept by the guest's agent: the engine
// checks what a caller asks for, refuses a language the sandbox's image
// lacks (naming those it has), and passes the rest to the agent. The
// guest bounds its sessions (cell.MaxContexts) itself; the engine's own
// count before a create only makes the common refusal a clear ErrQuota.

// contextDeadline bounds a context call to the guest: a list or a create
// answers at once, a delete within its program's grace to end.
const contextDeadline = restartDeadline

// agentSession is a normalized session as the agent client takes it.
func agentSession(s sandbox.Session) agentclient.Session {
	return agentclient.Session{Language: s.Language, Context: s.Context}
}

// imageLanguages is the languages of the image s booted
// (ImageInfo.Languages; none: not known), read once per sandbox: an image
// is not removed or changed while a sandbox uses it.
func (m *VMManager) imageLanguages(s *vmSandbox) []cell.LanguageInfo {
	if p := s.languages.Load(); p != nil {
		return *p
	}
	entry := m.sandboxImage(s)
	langs := m.imageInfo(entry, s.cfg.Image, s.cfg.Tenant, 0).Languages
	s.languages.Store(&langs)
	return langs
}

// checkLanguage refuses (ErrInvalid) a language the image of s lacks,
// naming those it has.
func (m *VMManager) checkLanguage(s *vmSandbox, l cell.Language) error {
	name := s.cfg.Image
	if isDefaultImage(name) {
		name = sandbox.DefaultImage
	}
	return sandbox.HasLanguage(name, m.imageLanguages(s), l)
}

// contextInfo is a session as the guest lists it, as the contract does.
func contextInfo(ci proto.ContextInfo) sandbox.ContextInfo {
	l, _ := cell.ParseLanguage(ci.Language) // the protocol checked it
	name := ci.Name
	if name == "" {
		name = cell.DefaultContext
	}
	return sandbox.ContextInfo{Language: l, Name: name, Cwd: ci.Cwd, Running: ci.Running}
}

// Contexts implements sandbox.Manager.
func (m *VMManager) Contexts(ctx context.Context, id string) ([]sandbox.ContextInfo, error) {
	s, release, err := m.readyHeld(id)
	if err != nil {
		return nil, err
	}
	defer release()
	return m.contexts(ctx, s)
}

func (m *VMManager) contexts(ctx context.Context, s *vmSandbox) ([]sandbox.ContextInfo, error) {
	callCtx, cancel := context.WithTimeout(ctx, contextDeadline)
	defer cancel()
	cs, err := s.agent.Contexts(callCtx)
	if err != nil {
		return nil, m.deadlineErr(ctx, callCtx, "context list", contextDeadline, m.agentErr(s, err))
	}
	out := make([]sandbox.ContextInfo, 0, len(cs))
	for _, ci := range cs {
		out = append(out, contextInfo(ci))
	}
	return out, nil
}

// CreateContext implements sandbox.Manager.
func (m *VMManager) CreateContext(ctx context.Context, id string, spec sandbox.ContextSpec) (sandbox.ContextInfo, error) {
	spec, err := spec.Normalize()
	if err != nil {
		return sandbox.ContextInfo{}, err
	}
	s, release, err := m.readyHeld(id)
	if err != nil {
		return sandbox.ContextInfo{}, err
	}
	defer release()
	if err := m.checkLanguage(s, spec.Language); err != nil {
		return sandbox.ContextInfo{}, err
	}
	have, err := m.contexts(ctx, s)
	if err != nil {
		return sandbox.ContextInfo{}, err
	}
	if len(have) >= cell.MaxContexts {
		return sandbox.ContextInfo{}, fmt.Errorf("%w: sandbox %s has %d sessions, the most it may have; delete a context first", sandbox.ErrQuota, id, len(have))
	}
	if spec.Name == "" {
		spec.Name = newContextName()
	}
	sess := sandbox.Session{Language: spec.Language, Context: spec.Name}
	for _, c := range have {
		if c.Name == spec.Name && c.Language.Runtime() == spec.Language.Runtime() {
			return sandbox.ContextInfo{}, fmt.Errorf("%w: sandbox %s already has %s", sandbox.ErrInvalid, id, sandbox.Session{Language: c.Language, Context: c.Name})
		}
	}
	callCtx, cancel := context.WithTimeout(ctx, contextDeadline)
	defer cancel()
	ci, err := s.agent.CreateContext(callCtx, agentSession(sess), spec.Cwd)
	if err != nil {
		return sandbox.ContextInfo{}, m.deadlineErr(ctx, callCtx, "context create", contextDeadline, m.agentErr(s, err))
	}
	return contextInfo(ci), nil
}

// newContextName makes up a context's name: "ctx-" and 8 hex digits.
func newContextName() string {
	var b [4]byte
	rand.Read(b[:])
	return "ctx-" + hex.EncodeToString(b[:])
}

// DeleteContext implements sandbox.Manager.
func (m *VMManager) DeleteContext(ctx context.Context, id string, ss sandbox.Session) error {
	sess, err := ss.Normalize()
	if err != nil {
		return err
	}
	if sess.IsDefault() {
		return fmt.Errorf("%w: %s is a default session, which is not deleted; restart it instead", sandbox.ErrInvalid, sess)
	}
	s, release, err := m.readyHeld(id)
	if err != nil {
		return err
	}
	defer release()
	callCtx, cancel := context.WithTimeout(ctx, contextDeadline)
	defer cancel()
	if err := s.agent.DeleteContext(callCtx, agentSession(sess)); err != nil {
		return m.deadlineErr(ctx, callCtx, "context delete", contextDeadline, m.agentErr(s, err))
	}
	return nil
}
