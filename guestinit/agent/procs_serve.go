package agent

import (
	"context"
	"errors"
	"time"

	"github.com/cellvm/cellvm/guestinit/proto"
)

// proc serves an OpProc request.
func (ss *session) proc(req *proto.Request) bool {
	t := ss.s.procs
	r := req.Proc
	switch r.Op {
	case proto.ProcStart:
		w := newWatcher()
		p, exit, err := t.start(r, w)
		if errors.Is(err, errProcFull) {
			return ss.reply(errResponse(proto.CodeFull, err))
		}
		if err != nil {
			return ss.reply(errResponse(proto.CodeIO, err))
		}
		if exit != nil {
			return ss.reply(proto.Response{Proc: &proto.ProcReply{Exit: exit}})
		}
		return ss.stream(p, w, true)
	case proto.ProcAttach:
		p, err := t.get(r.PID)
		if err != nil {
			return ss.reply(errResponse(proto.CodeNotFound, err))
		}
		w, ok := p.attach()
		if !ok {
			return ss.reply(errResponse(proto.CodeNotFound, errProcGone))
		}
		return ss.stream(p, w, false)
	case proto.ProcList:
		return ss.reply(proto.Response{Proc: &proto.ProcReply{List: t.list()}})
	}
	p, err := t.get(r.PID)
	if err != nil {
		return ss.reply(errResponse(proto.CodeNotFound, err))
	}
	switch r.Op {
	case proto.ProcInput:
		err = p.input(r.Data, r.EOF)
	case proto.ProcSignal:
		err = p.signal(r.Signal)
	case proto.ProcResize:
		err = p.resize(*r.PTY)
	}
	switch {
	case errors.Is(err, errProcGone):
		return ss.reply(errResponse(proto.CodeNotFound, err))
	case errors.Is(err, errProcNoInput), errors.Is(err, errProcNoPTY):
		return ss.reply(errResponse(proto.CodeProcInvalid, err))
	case err != nil:
		return ss.reply(errResponse(proto.CodeIO, err))
	}
	return ss.reply(proto.Response{})
}

// stream sends w's events until the process ends (a response with its
// exit) or the host hangs up (the process goes on). A stream that fell
// behind ends with an error response.
func (ss *session) stream(p *gproc, w *procWatcher, started bool) bool {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := ss.watch(cancel)
	defer p.detach(w)
	send := func(e proto.ProcEvent) bool {
		ss.nc.SetWriteDeadline(time.Now().Add(ss.s.cfg.WriteTimeout))
		if err := ss.c.WriteJSON(proto.TypeEvent, e); err != nil {
			ss.s.log.Debug("agent: write a process event; the stream ends", "pid", p.info.PID, "err", err)
			cancel()
			return false
		}
		return true
	}
	if !send(proto.ProcEvent{Kind: proto.ProcEventStart, PID: p.info.PID}) {
		stop()
		return false
	}
	for {
		q, ended, lagged, exit := w.take()
		for _, e := range q {
			if !send(e) {
				stop()
				return false
			}
		}
		if ended {
			if !stop() {
				return false
			}
			if lagged {
				return ss.reply(errResponse(proto.CodeIO, errLagged))
			}
			return ss.reply(proto.Response{Proc: &proto.ProcReply{PID: p.info.PID, Exit: &exit}})
		}
		select {
		case <-w.wake:
		case <-ctx.Done():
			stop()
			return false
		}
	}
}
