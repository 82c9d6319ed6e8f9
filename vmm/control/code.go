package control

import (
	"errors"
	"syscall"
)

// Code says what kind of failure a control operation met, so that its
// requester decides by errors.Is, never by the error's text.
type Code string

const (
	// CodeBadRequest: the request was malformed (not JSON, an unknown op
	// or then, not the files it needs); the VM was not touched.
	CodeBadRequest Code = "bad_request"
	// CodeNoSpace: a file the operation wrote met a full disk (ENOSPC).
	CodeNoSpace Code = "no_space"
	// CodeNotRunning: the machine is not running (its guest ended).
	CodeNotRunning Code = "not_running"
	// CodeFailed: any other failure.
	CodeFailed Code = "failed"
)

// Error makes a Code an error, as the target of errors.Is.
func (c Code) Error() string { return string(c) }

// Error is a failed operation: its Code and what the VMM said.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Is makes errors.Is(err, CodeNoSpace) true of an *Error with that code.
func (e *Error) Is(target error) bool {
	c, ok := target.(Code)
	return ok && c == e.Code
}

// codedError is an error with the code the server answers it with.
type codedError struct {
	code Code
	err  error
}

func (e codedError) Error() string { return e.err.Error() }
func (e codedError) Unwrap() error { return e.err }

// WithCode gives err the code the control server answers it with; a
// handler uses it for failures the server cannot classify by itself.
func WithCode(c Code, err error) error { return codedError{c, err} }

// codeOf is the code a handler's error is answered with: its own
// (WithCode), no_space for ENOSPC anywhere in its chain, else failed.
func codeOf(err error) Code {
	var ce codedError
	switch {
	case errors.As(err, &ce):
		return ce.code
	case errors.Is(err, syscall.ENOSPC):
		return CodeNoSpace
	}
	return CodeFailed
}
