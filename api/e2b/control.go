package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// The control plane (api.DOMAIN): E2B's REST API as the SDK calls it,
// mapped onto the Manager. Each handler runs as the caller the API key
// stands for (server.go), so the tenant layer answers another tenant's
// sandbox as a missing one: 404.

// EnvdVersion is the envd version cellvm's sandboxes report. The SDK
// picks its wire by it: at least 0.5.2 has closeStdin, and below 0.5.7
// files.write uploads multipart/form-data (which api/e2b's /files takes).
const EnvdVersion = "0.5.6"

// clientID is E2B's clientID (the node a sandbox runs on): one for all.
const clientID = "cellvm"

// Templates that name the daemon's default image (E2B's base template and
// the code interpreter's).
var defaultTemplates = map[string]bool{"": true, "base": true, "code-interpreter-v1": true, "code-interpreter": true}

// defaultTimeout is a sandbox's lifetime when create names none (the SDK's
// own default, 300 s).
const defaultTimeout = 300 * time.Second

// maxBody bounds a control-plane request's body.
const maxBody = 1 << 20

func (h *Handler) control(w http.ResponseWriter, r *http.Request) {
	p := strings.TrimSuffix(r.URL.Path, "/")
	if v2, ok := strings.CutPrefix(p, "/v2"); ok && (v2 == "/sandboxes" || strings.HasPrefix(v2, "/sandboxes/")) {
		if v2 == "/sandboxes" && r.Method == http.MethodGet {
			h.list(w, r, true)
			return
		}
		p = v2
	}
	switch {
	case p == "/sandboxes":
		switch r.Method {
		case http.MethodPost:
			h.create(w, r)
		case http.MethodGet:
			h.list(w, r, false)
		default:
			methodNotAllowed(w, "GET, POST")
		}
		return
	case p == "/snapshots" && r.Method == http.MethodGet:
		h.listSnapshots(w, r)
		return
	case strings.HasPrefix(p, "/templates/") && r.Method == http.MethodDelete:
		h.deleteSnapshot(w, r, strings.TrimPrefix(p, "/templates/"))
		return
	case strings.HasPrefix(p, "/sandboxes/"):
		rest := strings.TrimPrefix(p, "/sandboxes/")
		id, op, _ := strings.Cut(rest, "/")
		if !validID(id) {
			writeErrorf(w, http.StatusNotFound, "sandbox %q not found", clip(id, 64))
			return
		}
		h.sandboxOp(w, r, id, op)
		return
	}
	writeErrorf(w, http.StatusNotFound, "%s %s is not part of E2B's API as cellvm serves it", clip(r.Method, 16), clip(r.URL.Path, 128))
}

func (h *Handler) sandboxOp(w http.ResponseWriter, r *http.Request, id, op string) {
	type route struct {
		method string
		fn     func(http.ResponseWriter, *http.Request, string)
	}
	routes := map[string]route{
		"":          {http.MethodGet, h.get},
		"timeout":   {http.MethodPost, h.setTimeout},
		"refreshes": {http.MethodPost, h.refresh},
		"pause":     {http.MethodPost, h.pause},
		"resume":    {http.MethodPost, h.resume},
		"connect":   {http.MethodPost, h.connect},
		"snapshots": {http.MethodPost, h.snapshot},
		"metrics":   {http.MethodGet, h.metrics},
	}
	if op == "" && r.Method == http.MethodDelete {
		h.kill(w, r, id)
		return
	}
	rt, ok := routes[op]
	if !ok {
		writeErrorf(w, http.StatusNotFound, "%s %s is not part of E2B's API as cellvm serves it", clip(r.Method, 16), clip(r.URL.Path, 128))
		return
	}
	if r.Method != rt.method {
		methodNotAllowed(w, rt.method)
		return
	}
	rt.fn(w, r, id)
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	writeErrorf(w, http.StatusMethodNotAllowed, "method not allowed here (allowed: %s)", allow)
}

// decode reads a JSON body into v; an empty body leaves v as it is.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return fmt.Errorf("%w: the body is over %d bytes", sandbox.ErrTooLarge, maxBody)
		}
		return fmt.Errorf("%w: reading the body: %v", sandbox.ErrInvalid, err)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: the body is not the JSON this call takes: %v", sandbox.ErrInvalid, err)
	}
	return nil
}

// sandboxJSON is E2B's Sandbox: what create, connect and resume return.
type sandboxJSON struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken string  `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// listedJSON is E2B's ListedSandbox; detailJSON its SandboxDetail.
type listedJSON struct {
	TemplateID   string            `json:"templateID"`
	SandboxID    string            `json:"sandboxID"`
	ClientID     string            `json:"clientID"`
	StartedAt    time.Time         `json:"startedAt"`
	EndAt        time.Time         `json:"endAt"`
	CPUCount     int               `json:"cpuCount"`
	MemoryMB     int               `json:"memoryMB"`
	DiskSizeMB   int               `json:"diskSizeMB"`
	Metadata     map[string]string `json:"metadata"`
	State        string            `json:"state"`
	EnvdVersion  string            `json:"envdVersion"`
	VolumeMounts []any             `json:"volumeMounts"`
}

type detailJSON struct {
	listedJSON
	EnvdAccessToken     string         `json:"envdAccessToken"`
	Domain              *string        `json:"domain"`
	AllowInternetAccess bool           `json:"allowInternetAccess"`
	Network             *networkJSON   `json:"network,omitempty"`
	Lifecycle           map[string]any `json:"lifecycle"`
}

// templateOf names what a sandbox was made from, in E2B's terms.
func templateOf(c sandbox.Config) string {
	switch {
	case c.Snapshot != "":
		return c.Snapshot
	case c.Image == "" || c.Image == sandbox.DefaultImage:
		return "base"
	}
	return c.Image
}

// stateOf is a cellvm state in E2B's words (running or paused); a
// sandbox starting or stopping is running, a lost one says so.
func stateOf(s sandbox.State) string {
	switch s {
	case sandbox.StatePaused:
		return "paused"
	case sandbox.StateLost:
		return "lost"
	}
	return "running"
}

// endOf is when the sandbox's TTL ends it (far off for none).
func endOf(i sandbox.Info) time.Time {
	if i.Config.TTL <= 0 {
		return time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	}
	return i.CreatedAt.Add(i.Config.TTL)
}

func (h *Handler) sandboxOf(i sandbox.Info) sandboxJSON {
	return sandboxJSON{
		TemplateID:         templateOf(i.Config),
		SandboxID:          i.ID,
		ClientID:           clientID,
		EnvdVersion:        EnvdVersion,
		EnvdAccessToken:    h.minter.token(envdKind, i.Config.Tenant, i.ID),
		TrafficAccessToken: h.minter.token(trafficKind, i.Config.Tenant, i.ID),
	}
}

func listedOf(i sandbox.Info) listedJSON {
	md := i.Config.Labels
	if md == nil {
		md = map[string]string{}
	}
	return listedJSON{
		TemplateID: templateOf(i.Config), SandboxID: i.ID, ClientID: clientID,
		StartedAt: i.CreatedAt.UTC(), EndAt: endOf(i).UTC(),
		CPUCount: i.Config.VCPUs, MemoryMB: i.Config.MemoryMiB,
		Metadata: md, State: stateOf(i.State), EnvdVersion: EnvdVersion, VolumeMounts: []any{},
	}
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request, id string) {
	i, err := h.m.Get(r.Context(), id)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	d := detailJSON{listedJSON: listedOf(i), EnvdAccessToken: h.minter.token(envdKind, i.Config.Tenant, i.ID),
		Lifecycle: map[string]any{"onTimeout": "kill", "autoResume": false}}
	if i.Config.Network != nil {
		d.AllowInternetAccess = isInternet(i.Config.Network.Allow)
		d.Network = &networkJSON{AllowOut: i.Config.Network.Allow}
	}
	writeJSON(w, http.StatusOK, d)
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request, id string) {
	if err := h.m.Delete(r.Context(), id); err != nil {
		writeError(w, h.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// timeoutBody is the body of timeout, connect and resume.
type timeoutBody struct {
	Timeout   *int64 `json:"timeout"`
	AutoPause *bool  `json:"autoPause"`
	Memory    *bool  `json:"memory"`
}

// seconds checks a timeout in seconds: 1 s to sandbox.MaxTTL.
func seconds(field string, s int64) (time.Duration, error) {
	max := int64(sandbox.MaxTTL / time.Second)
	if s < 1 || s > max {
		return 0, fmt.Errorf("%w: %s %d s is out of range 1..%d", sandbox.ErrInvalid, field, s, max)
	}
	return time.Duration(s) * time.Second, nil
}

func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request, id string) {
	var b timeoutBody
	if err := decode(w, r, &b); err != nil {
		writeError(w, h.log, err)
		return
	}
	if b.Timeout == nil {
		writeErrorf(w, http.StatusBadRequest, "timeout (seconds) is required")
		return
	}
	ttl, err := seconds("timeout", *b.Timeout)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	if _, err := h.m.SetTTL(r.Context(), id, ttl); err != nil {
		writeError(w, h.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// extend makes the sandbox live at least ttl more, never shortening it
// (connect's and refreshes' meaning).
func (h *Handler) extend(r *http.Request, i sandbox.Info, ttl time.Duration) (sandbox.Info, error) {
	if !h.now().Add(ttl).After(endOf(i)) {
		return i, nil
	}
	return h.m.SetTTL(r.Context(), i.ID, ttl)
}

func (h *Handler) refresh(w http.ResponseWriter, r *http.Request, id string) {
	var b struct {
		Duration *int64 `json:"duration"`
	}
	if err := decode(w, r, &b); err != nil {
		writeError(w, h.log, err)
		return
	}
	i, err := h.m.Get(r.Context(), id)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	d := int64(defaultTimeout / time.Second)
	if b.Duration != nil {
		d = *b.Duration
	}
	ttl, err := seconds("duration", d)
	if err == nil {
		_, err = h.extend(r, i, ttl)
	}
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) pause(w http.ResponseWriter, r *http.Request, id string) {
	var b timeoutBody
	if err := decode(w, r, &b); err != nil {
		writeError(w, h.log, err)
		return
	}
	if b.Memory != nil && !*b.Memory {
		writeErrorf(w, http.StatusBadRequest, "a pause without memory (keepMemory: false) is not supported by cellvm: a paused sandbox keeps its memory")
		return
	}
	i, err := h.m.Get(r.Context(), id)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	if i.State == sandbox.StatePaused {
		writeErrorf(w, http.StatusConflict, "sandbox %s is already paused", id)
		return
	}
	if err := h.m.Pause(r.Context(), id); err != nil {
		if errors.Is(err, sandbox.ErrBusy) && !strings.Contains(err.Error(), "already paused") {
			// The SDK reads a 409 from pause as "already paused" and
			// returns false: a refused pause must raise instead.
			writeErrorf(w, http.StatusLocked, "sandbox %s cannot be paused now: %v", id, err)
			return
		}
		writeError(w, h.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// resume is E2B's deprecated resume: a running sandbox is 409.
func (h *Handler) resume(w http.ResponseWriter, r *http.Request, id string) {
	h.wake(w, r, id, false)
}

// connect resumes a paused sandbox (201) or finds a running one (200).
func (h *Handler) connect(w http.ResponseWriter, r *http.Request, id string) {
	h.wake(w, r, id, true)
}

func (h *Handler) wake(w http.ResponseWriter, r *http.Request, id string, runningOK bool) {
	var b timeoutBody
	if err := decode(w, r, &b); err != nil {
		writeError(w, h.log, err)
		return
	}
	if b.AutoPause != nil && *b.AutoPause {
		writeErrorf(w, http.StatusBadRequest, "autoPause is not supported by cellvm: a sandbox's timeout ends it (pause it yourself, or use cellvm's idle_pause_s)")
		return
	}
	if b.Memory != nil && !*b.Memory {
		writeErrorf(w, http.StatusBadRequest, "onResume 'reboot' is not supported by cellvm: a paused sandbox resumes with its memory")
		return
	}
	var ttl time.Duration
	if b.Timeout != nil {
		var err error
		if ttl, err = seconds("timeout", *b.Timeout); err != nil {
			writeError(w, h.log, err)
			return
		}
	}
	ctx := r.Context()
	i, err := h.m.Get(ctx, id)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	status := http.StatusOK
	switch i.State {
	case sandbox.StatePaused:
		if err := h.m.Resume(ctx, id); err != nil {
			writeError(w, h.log, err)
			return
		}
		status = http.StatusCreated
	case sandbox.StateLost:
		writeErrorf(w, http.StatusConflict, "sandbox %s's VM exited; it can only be killed", id)
		return
	default:
		if !runningOK {
			writeErrorf(w, http.StatusConflict, "sandbox %s is already running", id)
			return
		}
	}
	if ttl > 0 {
		if i, err = h.extend(r, i, ttl); err != nil {
			writeError(w, h.log, err)
			return
		}
	}
	writeJSON(w, status, h.sandboxOf(i))
}

func (h *Handler) metrics(w http.ResponseWriter, r *http.Request, id string) {
	i, err := h.m.Get(r.Context(), id)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, []map[string]any{{
		"timestamp": h.now().UTC(), "timestampUnix": h.now().Unix(),
		"cpuCount": i.Config.VCPUs, "cpuUsedPct": 0,
		"memUsed": i.Usage.MemoryBytes, "memTotal": int64(i.Config.MemoryMiB) << 20,
		"memCache": 0, "diskUsed": 0, "diskTotal": 0,
	}})
}

// listQuery is GET /v2/sandboxes's query.
type listQuery struct {
	filter       sandbox.ListFilter
	template     string
	startedAfter time.Time
	desc         bool
	limit        int
	after        *pageKey
}

// pageKey is a list page's end: its last sandbox's start and id, as
// "UNIXNANO.ID" (the nextToken).
type pageKey struct {
	at int64
	id string
}

func (k pageKey) String() string { return fmt.Sprintf("%d.%s", k.at, k.id) }

// before reports whether k sorts before i in the list's order.
func (k pageKey) before(i sandbox.Info, desc bool) bool {
	at := i.CreatedAt.UnixNano()
	if at != k.at {
		return (k.at < at) != desc
	}
	return k.id < i.ID
}

func parsePageKey(s string) (*pageKey, bool) {
	a, id, ok := strings.Cut(s, ".")
	var at int64
	if !ok || !validID(id) || len(a) > 20 {
		return nil, false
	}
	if _, err := fmt.Sscanf(a, "%d", &at); err != nil || fmt.Sprint(at) != a {
		return nil, false
	}
	return &pageKey{at: at, id: id}, true
}

const (
	defaultListLimit = 100
	maxListLimit     = 1000
)

func (h *Handler) list(w http.ResponseWriter, r *http.Request, v2 bool) {
	q, err := parseListQuery(r, v2)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	all, err := h.m.List(r.Context())
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	var out []sandbox.Info
	for _, i := range all {
		if !q.filter.Match(i) || q.template != "" && templateOf(i.Config) != q.template ||
			!q.startedAfter.IsZero() && !i.CreatedAt.After(q.startedAfter) {
			continue
		}
		out = append(out, i)
	}
	sort.Slice(out, func(a, b int) bool {
		if !out[a].CreatedAt.Equal(out[b].CreatedAt) {
			return out[a].CreatedAt.Before(out[b].CreatedAt) != q.desc
		}
		return out[a].ID < out[b].ID
	})
	if q.after != nil {
		// The page after the token's sandbox, in the same order, whether
		// or not that sandbox is still there.
		n := sort.Search(len(out), func(k int) bool { return q.after.before(out[k], q.desc) })
		out = out[n:]
	}
	if len(out) > q.limit {
		out = out[:q.limit]
		last := out[len(out)-1]
		w.Header().Set("X-Next-Token", pageKey{at: last.CreatedAt.UnixNano(), id: last.ID}.String())
	}
	res := make([]listedJSON, 0, len(out))
	for _, i := range out {
		res = append(res, listedOf(i))
	}
	writeJSON(w, http.StatusOK, res)
}

func parseListQuery(r *http.Request, v2 bool) (listQuery, error) {
	qv := r.URL.Query()
	q := listQuery{limit: defaultListLimit, desc: true}
	if md := qv.Get("metadata"); md != "" {
		labels, err := parseMetadataQuery(md)
		if err != nil {
			return q, err
		}
		q.filter.Labels = labels
	}
	states := qv.Get("state")
	if !v2 && states == "" {
		states = "running"
	}
	for _, s := range strings.Split(states, ",") {
		switch strings.TrimSpace(s) {
		case "":
		case "running":
			q.filter.States = append(q.filter.States, sandbox.StateRunning, sandbox.StateStarting)
		case "paused":
			q.filter.States = append(q.filter.States, sandbox.StatePaused)
		default:
			return q, fmt.Errorf("%w: state %q: want running or paused", sandbox.ErrInvalid, clip(s, 32))
		}
	}
	if len(q.filter.States) == 0 {
		q.filter.States = []sandbox.State{sandbox.StateRunning, sandbox.StateStarting, sandbox.StatePaused}
	}
	q.template = qv.Get("template")
	if s := qv.Get("startedAfter"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return q, fmt.Errorf("%w: startedAfter %q is not an RFC 3339 time", sandbox.ErrInvalid, clip(s, 40))
		}
		q.startedAfter = t
	}
	switch qv.Get("order") {
	case "", "desc":
	case "asc":
		q.desc = false
	default:
		return q, fmt.Errorf("%w: order: want asc or desc", sandbox.ErrInvalid)
	}
	if s := qv.Get("limit"); s != "" {
		var n int
		if _, err := fmt.Sscanf(s, "%d", &n); err != nil || n < 1 || n > maxListLimit || fmt.Sprint(n) != s {
			return q, fmt.Errorf("%w: limit %q: want 1..%d", sandbox.ErrInvalid, clip(s, 16), maxListLimit)
		}
		q.limit = n
	}
	if t := qv.Get("nextToken"); t != "" {
		k, ok := parsePageKey(t)
		if !ok {
			return q, fmt.Errorf("%w: nextToken is not one this server gave", sandbox.ErrInvalid)
		}
		q.after = k
	}
	return q, nil
}
