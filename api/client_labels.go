package api

import (
	"context"
	"net/http"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// SetTTL gives the sandbox ttl more to live from now (POST
// /v1/sandboxes/{id}/ttl), in whole seconds, a part of one rounded up.
func (c *Client) SetTTL(ctx context.Context, id string, ttl time.Duration) (sandbox.Info, error) {
	var info sandbox.Info
	req := TTLRequest{TTLS: int64((ttl + time.Second - 1) / time.Second)}
	err := c.do(ctx, http.MethodPost, c.sandboxURL(id, "ttl"), req, &info, http.StatusOK)
	return info, err
}

// ListPage lists the sandboxes q's filter matches, one page of q.Limit at
// a time (all of them when it is 0); the answer's Next asks for the page
// after.
func (c *Client) ListPage(ctx context.Context, q ListQuery) (ListResponse, error) {
	var lr ListResponse
	u := c.sandboxesURL()
	if v := q.values(); len(v) > 0 {
		u += "?" + v.Encode()
	}
	err := c.do(ctx, http.MethodGet, u, nil, &lr, http.StatusOK)
	return lr, err
}

// Version returns the daemon's version (GET /v1/version).
func (c *Client) Version(ctx context.Context) (VersionInfo, error) {
	var v VersionInfo
	err := c.do(ctx, http.MethodGet, c.base+"/v1/version", nil, &v, http.StatusOK)
	return v, err
}
