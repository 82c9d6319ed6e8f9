package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// Actions that are not API routes.
const (
	// ActionSandboxEnd is a sandbox's last record: its egress verdicts.
	ActionSandboxEnd = "sandbox.end"
	// ActionAuth is a request the auth gate refused (401 or 429).
	ActionAuth = "auth"
	// ActionPolicyRefused is a cell or command the operator's cell
	// policy hook refused (serve --cell-policy); ResultStatus says which
	// kind ("cell" or "exec").
	ActionPolicyRefused = "cell_policy.refused"
)

// Record is one audit line. See the package documentation for the fields.
type Record struct {
	Time    time.Time `json:"time"`
	Tenant  string    `json:"tenant,omitempty"`
	TokenID string    `json:"token_id,omitempty"`
	Peer    string    `json:"peer,omitempty"`
	// Operator: the caller was the operator (a Unix-socket peer), acting
	// for Tenant when it names one.
	Operator bool   `json:"operator,omitempty"`
	Action   string `json:"action"`

	Sandbox   string `json:"sandbox,omitempty"`
	Snapshot  string `json:"snapshot,omitempty"`
	Workspace string `json:"workspace,omitempty"`
	Image     string `json:"image,omitempty"`
	// ImageSource, ImageRef and ImageDigest describe an image a request
	// made: how (build, pull, import), the reference pulled or the base
	// built on, and the OCI manifest's digest. Never a registry token.
	ImageSource string `json:"image_source,omitempty"`
	ImageRef    string `json:"image_ref,omitempty"`
	ImageDigest string `json:"image_digest,omitempty"`

	CodeSHA256  string `json:"code_sha256,omitempty"`
	CodeBytes   int64  `json:"code_bytes,omitempty"`
	Code        string `json:"code,omitempty"`
	CodeClipped bool   `json:"code_clipped,omitempty"`

	Path   string `json:"path,omitempty"`
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`

	Policy *PolicyChange `json:"policy,omitempty"`

	Status       int     `json:"status,omitempty"`
	ResultStatus string  `json:"result_status,omitempty"`
	KilledBy     string  `json:"killed_by,omitempty"`
	DurationMS   float64 `json:"duration_ms"`
	Error        string  `json:"error,omitempty"`
	Reason       string  `json:"reason,omitempty"`

	Egress     *Egress `json:"egress,omitempty"`
	Suppressed int64   `json:"suppressed,omitempty"`
}

// PolicyChange is a network policy update's allow lists, before and after.
type PolicyChange struct {
	OldAllow []string `json:"old_allow"`
	NewAllow []string `json:"new_allow"`
}

// Egress is a sandbox's egress verdicts over its life.
type Egress struct {
	Allowed      uint64       `json:"allowed"`
	Dropped      uint64       `json:"dropped"`
	DNSForwarded uint64       `json:"dns_forwarded"`
	DNSRefused   uint64       `json:"dns_refused"`
	Names        []EgressName `json:"names,omitempty"`
}

// EgressName counts the DNS answers for one name.
type EgressName struct {
	Name      string `json:"name"`
	Forwarded uint64 `json:"forwarded"`
	Refused   uint64 `json:"refused"`
}

// SetCode records a cell's code: its SHA-256 and size, and the text,
// which Write keeps only when the log was opened with FullCode.
func (r *Record) SetCode(code string) {
	sum := sha256.Sum256([]byte(code))
	r.CodeSHA256 = hex.EncodeToString(sum[:])
	r.CodeBytes = int64(len(code))
	r.Code = code
}

// SetArgv records an exec's argv as SetCode does its JSON array form
// (["python3","-c","..."]), which no two argvs share.
func (r *Record) SetArgv(argv []string) {
	b, _ := json.Marshal(argv)
	r.SetCode(string(b))
}

// Bounds of what Write keeps of a record.
const (
	maxID     = 256
	maxReason = 1024
	maxPath   = 4096
	maxList   = 64
	// MaxLineBytes bounds one line: Write never writes a longer one and
	// readers report one as bad.
	MaxLineBytes = 1 << 20
)

// bound clips every field of r to its bound.
func bound(r Record, fullCode bool, maxCode int) Record {
	for _, s := range []*string{&r.Tenant, &r.TokenID, &r.Peer, &r.Action, &r.Sandbox, &r.Snapshot,
		&r.Workspace, &r.Image, &r.ImageSource, &r.ImageDigest, &r.CodeSHA256, &r.SHA256, &r.ResultStatus, &r.KilledBy, &r.Error} {
		*s = clip(*s, maxID)
	}
	r.Path = clip(r.Path, maxPath)
	r.ImageRef = clip(r.ImageRef, maxPath)
	r.Reason = clip(r.Reason, maxReason)
	if !fullCode {
		r.Code, r.CodeClipped = "", false
	} else if len(r.Code) > maxCode {
		r.Code, r.CodeClipped = clip(r.Code, maxCode), true
	}
	if r.Policy != nil {
		r.Policy = &PolicyChange{OldAllow: clipList(r.Policy.OldAllow), NewAllow: clipList(r.Policy.NewAllow)}
	}
	if r.Egress != nil {
		e := *r.Egress
		if len(e.Names) > maxList {
			e.Names = e.Names[:maxList]
		}
		e.Names = append([]EgressName(nil), e.Names...)
		for i := range e.Names {
			e.Names[i].Name = clip(e.Names[i].Name, maxID)
		}
		r.Egress = &e
	}
	return r
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// clipList bounds a list; a nil list stays nil (JSON null: not given),
// an empty one empty ([]: nothing allowed).
func clipList(l []string) []string {
	if l == nil {
		return nil
	}
	out := make([]string, 0, min(len(l), maxList))
	for _, s := range l[:min(len(l), maxList)] {
		out = append(out, clip(s, maxID))
	}
	return out
}
