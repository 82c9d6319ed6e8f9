package agent

import (
	"errors"

	"github.com/cellvm/cellvm/guestinit/proto"
)

// EnvSetter is an Interpreter that takes the sandbox's environment
// variables (*interp.Interp does). It is a separate interface so that
// interpreters without an environment (test fakes) need not implement it;
// a setenv request to those fails.
type EnvSetter interface {
	SetEnv(env map[string]string) error
}

func (ss *session) setEnv(req *proto.Request) bool {
	es, ok := ss.s.cfg.Interp.(EnvSetter)
	if !ok {
		return ss.reply(errResponse(proto.CodeBadRequest, errors.New("this agent's interpreter takes no environment")))
	}
	if err := es.SetEnv(req.Env); err != nil {
		return ss.reply(errResponse(proto.CodeInterp, err))
	}
	return ss.reply(proto.Response{})
}
