package api

import (
	"context"
	"net/http"
	"net/url"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// Contexts implements sandbox.Manager.
func (c *Client) Contexts(ctx context.Context, id string) ([]sandbox.ContextInfo, error) {
	var out []sandbox.ContextInfo
	err := c.do(ctx, http.MethodGet, c.sandboxURL(id, "contexts"), nil, &out, http.StatusOK)
	return out, err
}

// CreateContext implements sandbox.Manager.
func (c *Client) CreateContext(ctx context.Context, id string, spec sandbox.ContextSpec) (sandbox.ContextInfo, error) {
	var out sandbox.ContextInfo
	err := c.do(ctx, http.MethodPost, c.sandboxURL(id, "contexts"), spec, &out, http.StatusCreated)
	return out, err
}

// DeleteContext implements sandbox.Manager.
func (c *Client) DeleteContext(ctx context.Context, id string, s sandbox.Session) error {
	name := s.Context
	if name == "" {
		name = cell.DefaultContext // the server says a default session is not deleted
	}
	u := c.sandboxURL(id, "contexts", name)
	if s.Language != "" {
		u += "?" + url.Values{"language": {string(s.Language)}}.Encode()
	}
	return c.do(ctx, http.MethodDelete, u, nil, nil, http.StatusNoContent)
}
