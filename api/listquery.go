package api

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// GET /v1/sandboxes's query: filters by label and state, and pages.
//
//	?label=run=42&label=user=alice   every label must match (k=v, repeated)
//	&state=running,paused            any of these states (repeated or commas)
//	&limit=50&next=TOKEN             at most 50, from where TOKEN says
//
// Filtering is done here over Manager.List's answer, which the tenant
// layer has already cut down to the caller's own sandboxes, so a filter or
// a page can never name or reveal another tenant's. A page token is the
// position of the last sandbox sent (its creation time and id, opaque to
// the client), not an index: a sandbox deleted between two pages neither
// repeats nor hides another. Without limit the answer is every match, as
// before filters existed.

// Bounds on the list query.
const (
	// MaxListLimit is the largest page.
	MaxListLimit = 1000
	// maxStateFilters bounds the states one query may name.
	maxStateFilters = 8
	// maxPageToken bounds a next token's length.
	maxPageToken = 256
)

// ListQuery is what GET /v1/sandboxes may ask (Client.ListPage).
type ListQuery struct {
	Filter sandbox.ListFilter
	// Limit is the most sandboxes one page holds (0: all of them).
	Limit int
	// Next is the token of the previous page's ListResponse.Next.
	Next string
}

// values is q as a URL query.
func (q ListQuery) values() url.Values {
	v := url.Values{}
	keys := make([]string, 0, len(q.Filter.Labels))
	for k := range q.Filter.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v.Add("label", k+"="+q.Filter.Labels[k])
	}
	for _, s := range q.Filter.States {
		v.Add("state", string(s))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Next != "" {
		v.Set("next", q.Next)
	}
	return v
}

// parseListQuery reads and checks the query; every error wraps ErrInvalid.
func parseListQuery(v url.Values) (ListQuery, error) {
	var q ListQuery
	for k := range v {
		switch k {
		case "label", "state", "limit", "next":
		default:
			return q, fmt.Errorf("%w: unknown query parameter %q (label, state, limit, next)", sandbox.ErrInvalid, clipString(k, 32))
		}
	}
	labels := v["label"]
	if len(labels) > sandbox.MaxLabels {
		return q, fmt.Errorf("%w: %d label filters, at most %d", sandbox.ErrInvalid, len(labels), sandbox.MaxLabels)
	}
	for _, kv := range labels {
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			return q, fmt.Errorf("%w: label filter %q is not key=value", sandbox.ErrInvalid, clipString(kv, 64))
		}
		if q.Filter.Labels == nil {
			q.Filter.Labels = map[string]string{}
		}
		if old, dup := q.Filter.Labels[k]; dup && old != val {
			return q, fmt.Errorf("%w: label %q is filtered by two values", sandbox.ErrInvalid, clipString(k, 64))
		}
		q.Filter.Labels[k] = val
	}
	if err := sandbox.ValidateLabels(q.Filter.Labels); err != nil {
		return q, err
	}
	for _, s := range v["state"] {
		for _, one := range strings.Split(s, ",") {
			st := sandbox.State(strings.TrimSpace(one))
			if !knownState(st) {
				return q, fmt.Errorf("%w: state %q: one of starting, running, paused, lost, stopping", sandbox.ErrInvalid, clipString(one, 32))
			}
			if !slices.Contains(q.Filter.States, st) {
				q.Filter.States = append(q.Filter.States, st)
			}
			if len(q.Filter.States) > maxStateFilters {
				return q, fmt.Errorf("%w: too many state filters", sandbox.ErrInvalid)
			}
		}
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxListLimit {
			return q, fmt.Errorf("%w: limit %q: a whole number from 1 to %d", sandbox.ErrInvalid, clipString(l, 16), MaxListLimit)
		}
		q.Limit = n
	}
	q.Next = v.Get("next")
	if q.Next != "" {
		if _, _, err := decodePageToken(q.Next); err != nil {
			return q, err
		}
	}
	return q, nil
}

func knownState(s sandbox.State) bool {
	switch s {
	case sandbox.StateStarting, sandbox.StateRunning, sandbox.StatePaused, sandbox.StateLost, sandbox.StateStopping:
		return true
	}
	return false
}

// page filters infos and cuts out the page q asks for, in the order of
// creation (then id). next is the token of the page after, "" at the end.
func (q ListQuery) page(infos []sandbox.Info) (out []sandbox.Info, next string) {
	out = make([]sandbox.Info, 0, len(infos))
	for _, in := range infos {
		if q.Filter.Match(in) {
			out = append(out, in)
		}
	}
	slices.SortStableFunc(out, func(a, b sandbox.Info) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if q.Next != "" {
		at, id, _ := decodePageToken(q.Next)
		i := 0
		for i < len(out) && !after(out[i], at, id) {
			i++
		}
		out = out[i:]
	}
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
		last := out[len(out)-1]
		next = encodePageToken(last.CreatedAt, last.ID)
	}
	return out, next
}

// after reports whether in comes after the position (at, id).
func after(in sandbox.Info, at time.Time, id string) bool {
	if c := in.CreatedAt.Compare(at); c != 0 {
		return c > 0
	}
	return in.ID > id
}

func encodePageToken(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at.UnixNano(), 10) + ":" + id))
}

func decodePageToken(tok string) (time.Time, string, error) {
	bad := fmt.Errorf("%w: next %q is not a page token this daemon gave", sandbox.ErrInvalid, clipString(tok, 32))
	if len(tok) > maxPageToken {
		return time.Time{}, "", bad
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return time.Time{}, "", bad
	}
	ns, id, ok := strings.Cut(string(b), ":")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || id == "" {
		return time.Time{}, "", bad
	}
	return time.Unix(0, n), id, nil
}
