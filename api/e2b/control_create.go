package e2b

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/cellvm/cellvm/sandbox"
)

// newSandboxJSON is E2B's NewSandbox. Fields cellvm cannot honour are
// refused with a clear 400 rather than ignored: a caller that asked for
// them must not believe it got them.
type newSandboxJSON struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *networkJSON      `json:"network"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	MCP          json.RawMessage `json:"mcp"`
	IAM          json.RawMessage `json:"iam"`
	VolumeMounts json.RawMessage `json:"volumeMounts"`
}

// networkJSON is E2B's network configuration: cellvm's egress is an
// allowlist, so allowOut maps onto it and denyOut (or rules, proxies)
// cannot.
type networkJSON struct {
	AllowOut           []string        `json:"allowOut,omitempty"`
	DenyOut            []string        `json:"denyOut,omitempty"`
	Rules              json.RawMessage `json:"rules,omitempty"`
	EgressProxy        json.RawMessage `json:"egressProxy,omitempty"`
	AllowPublicTraffic *bool           `json:"allowPublicTraffic,omitempty"`
	MaskRequestHost    *string         `json:"maskRequestHost,omitempty"`
	HTTPSPorts         json.RawMessage `json:"httpsPorts,omitempty"`
}

// internet is the allowlist of "the internet": every address; the host's
// egress rules still keep private and metadata ranges closed.
var internet = []string{"0.0.0.0/0"}

func isInternet(allow []string) bool { return slices.Contains(allow, internet[0]) }

func present(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null"
}

// config maps a create's body onto a cellvm Config.
func (h *Handler) config(r *http.Request, b newSandboxJSON) (sandbox.Config, error) {
	var c sandbox.Config
	switch {
	case present(b.MCP):
		return c, fmt.Errorf("%w: mcp is not supported by cellvm (run your MCP server as a command)", sandbox.ErrNotSupported)
	case present(b.IAM):
		return c, fmt.Errorf("%w: iam tokens are not supported by cellvm", sandbox.ErrNotSupported)
	case present(b.VolumeMounts):
		return c, fmt.Errorf("%w: volumeMounts are not supported by cellvm's E2B front end (cellvm's own API has workspaces)", sandbox.ErrNotSupported)
	case b.AutoPause != nil && *b.AutoPause, b.AutoResume != nil && b.AutoResume.Enabled:
		return c, fmt.Errorf("%w: lifecycle onTimeout 'pause' and autoResume are not supported by cellvm: the timeout ends the sandbox (pause it yourself)", sandbox.ErrNotSupported)
	}
	ttl := defaultTimeout
	if b.Timeout != nil {
		var err error
		if ttl, err = seconds("timeout", *b.Timeout); err != nil {
			return c, err
		}
	}
	c.TTL = ttl
	// The timeout is the lifetime, as in E2B: no idle timeout cuts it
	// short (a sandbox waiting for its user's next call is not idle in
	// E2B's sense).
	c.IdleTimeout = sandbox.Never
	c.Env = b.EnvVars
	c.Labels = b.Metadata
	net, err := networkOf(b)
	if err != nil {
		return c, err
	}
	c.Network = net
	if err := h.template(r, b.TemplateID, &c); err != nil {
		return c, err
	}
	return c, nil
}

// networkOf maps allow_internet_access and network onto an allowlist:
// the internet unless allow_internet_access is false (E2B's default is
// on), and then only network.allowOut.
func networkOf(b newSandboxJSON) (*sandbox.NetworkPolicy, error) {
	n := b.Network
	if n != nil {
		switch {
		case len(n.DenyOut) > 0:
			return nil, fmt.Errorf("%w: network.denyOut is not supported by cellvm: its egress is an allowlist (set allow_internet_access false and list allowOut)", sandbox.ErrNotSupported)
		case present(n.Rules), present(n.EgressProxy), present(n.HTTPSPorts), n.MaskRequestHost != nil:
			return nil, fmt.Errorf("%w: network rules, egressProxy, httpsPorts and maskRequestHost are not supported by cellvm", sandbox.ErrNotSupported)
		case n.AllowPublicTraffic != nil && *n.AllowPublicTraffic:
			return nil, fmt.Errorf("%w: allowPublicTraffic is not supported by cellvm: every port asks for the sandbox's traffic access token", sandbox.ErrNotSupported)
		}
	}
	if b.AllowInternetAccess == nil || *b.AllowInternetAccess {
		return &sandbox.NetworkPolicy{Allow: slices.Clone(internet)}, nil
	}
	if n == nil || len(n.AllowOut) == 0 {
		return nil, nil
	}
	return &sandbox.NetworkPolicy{Allow: slices.Clone(n.AllowOut)}, nil
}

// template maps templateID: E2B's base and code-interpreter templates are
// the daemon's default image, a snapshot id forks that snapshot, and any
// other name must be one of the daemon's images (400 naming them if not).
func (h *Handler) template(r *http.Request, t string, c *sandbox.Config) error {
	switch {
	case defaultTemplates[t]:
		return nil
	case sandbox.ValidSnapshotID(t):
		c.Snapshot = t
		return nil
	}
	imgs, err := h.m.Images(r.Context())
	if err != nil {
		return err
	}
	var names []string
	for _, i := range imgs {
		if i.Name == t {
			c.Image = t
			return nil
		}
		names = append(names, i.Name)
	}
	sort.Strings(names)
	return fmt.Errorf("%w: unknown template %q: cellvm serves base and code-interpreter-v1 (its default image), a snapshot's id, or one of its images: %s",
		sandbox.ErrInvalid, clip(t, 64), strings.Join(names, ", "))
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	var b newSandboxJSON
	if err := decode(w, r, &b); err != nil {
		writeError(w, h.log, err)
		return
	}
	cfg, err := h.config(r, b)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	if c, ok := sandbox.CallerFrom(r.Context()); ok {
		cfg.Tenant = c.Tenant
	}
	i, err := h.m.Create(r.Context(), cfg)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusCreated, h.sandboxOf(i))
}

// parseMetadataQuery reads list's metadata filter: the SDK encodes each
// key and value, joins them as a query string, and sends that as one
// (again encoded) parameter.
func parseMetadataQuery(s string) (map[string]string, error) {
	if len(s) > 16<<10 {
		return nil, fmt.Errorf("%w: the metadata filter is over 16 KiB", sandbox.ErrInvalid)
	}
	vals, err := url.ParseQuery(s)
	if err != nil {
		return nil, fmt.Errorf("%w: metadata filter: %v", sandbox.ErrInvalid, err)
	}
	out := map[string]string{}
	for k, vs := range vals {
		key, err1 := url.QueryUnescape(k)
		val, err2 := url.QueryUnescape(vs[len(vs)-1])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%w: metadata filter %q is not encoded as the SDK encodes it", sandbox.ErrInvalid, clip(k, 64))
		}
		out[key] = val
	}
	if len(out) > sandbox.MaxLabels {
		return nil, fmt.Errorf("%w: the metadata filter has %d keys, at most %d", sandbox.ErrInvalid, len(out), sandbox.MaxLabels)
	}
	return out, nil
}

// snapshotJSON is E2B's snapshot: its id (what create's templateID takes
// to fork it) and names (cellvm's snapshots have none).
type snapshotJSON struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func (h *Handler) snapshot(w http.ResponseWriter, r *http.Request, id string) {
	var b struct {
		Name string `json:"name"`
	}
	if err := decode(w, r, &b); err != nil {
		writeError(w, h.log, err)
		return
	}
	if b.Name != "" {
		writeErrorf(w, http.StatusNotImplemented, "naming a snapshot is not supported by cellvm: use its snapshotID")
		return
	}
	s, err := h.m.Snapshot(r.Context(), id)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotJSON{SnapshotID: s.ID, Names: []string{}})
}

func (h *Handler) listSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("name") != "" {
		writeErrorf(w, http.StatusNotImplemented, "snapshot names are not supported by cellvm")
		return
	}
	all, err := h.m.ListSnapshots(r.Context())
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	sort.Slice(all, func(a, b int) bool {
		if !all[a].CreatedAt.Equal(all[b].CreatedAt) {
			return all[a].CreatedAt.After(all[b].CreatedAt)
		}
		return all[a].ID < all[b].ID
	})
	out := []snapshotJSON{}
	for _, s := range all {
		if sb := q.Get("sandboxID"); sb != "" && s.SandboxID != sb {
			continue
		}
		out = append(out, snapshotJSON{SnapshotID: s.ID, Names: []string{}})
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteSnapshot is DELETE /templates/{id}, which the SDK's
// deleteSnapshot calls; templates other than snapshots are not deleted
// here.
func (h *Handler) deleteSnapshot(w http.ResponseWriter, r *http.Request, id string) {
	if !sandbox.ValidSnapshotID(id) {
		writeErrorf(w, http.StatusNotFound, "no snapshot %q (cellvm deletes only snapshots here)", clip(id, 64))
		return
	}
	if err := h.m.DeleteSnapshot(r.Context(), id); err != nil {
		writeError(w, h.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
