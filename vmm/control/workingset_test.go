package control

import (
	"errors"
	"os"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/cellvm/cellvm/vmm/snapshot"
)

func serveWorkingSet(t *testing.T, ws WorkingSetHandler) string {
	t.Helper()
	var snapshots atomic.Int32
	t.Cleanup(func() {
		if n := snapshots.Load(); n != 0 {
			t.Errorf("a working set request took %d snapshots", n)
		}
	})
	return serveWith(t, func(_, _ *os.File, _ Request) error { snapshots.Add(1); return nil }, ws)
}

// A working set request is answered with the handler's extents; a VMM
// without a handler, a failing one and one over the bound answer errors.
func TestWorkingSetRequest(t *testing.T) {
	want := []snapshot.Extent{{Off: 0, Len: 4096}, {Off: 1 << 20, Len: 8192}}
	got, err := WorkingSet(ctx(t), serveWorkingSet(t, func() ([]snapshot.Extent, error) { return want, nil }))
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("WorkingSet = %+v, %v; want %+v", got, err, want)
	}
	if _, err := WorkingSet(ctx(t), serveWorkingSet(t, nil)); err == nil {
		t.Fatal("a VMM without a working set handler answered one")
	}
	if _, err := WorkingSet(ctx(t), serveWorkingSet(t, func() ([]snapshot.Extent, error) { return nil, errors.New("booted") })); err == nil {
		t.Fatal("a failing handler's error was lost")
	}
	many := make([]snapshot.Extent, snapshot.MaxWorkingSetExtents+1)
	if _, err := WorkingSet(ctx(t), serveWorkingSet(t, func() ([]snapshot.Extent, error) { return many, nil })); err == nil {
		t.Fatal("a working set over the bound was answered")
	}
}

// A working set request that carries files is refused, and a snapshot
// request is still a snapshot.
func TestWorkingSetRequestWithFilesIsRefused(t *testing.T) {
	var called atomic.Bool
	sock := serveWorkingSet(t, func() ([]snapshot.Extent, error) { called.Store(true); return nil, nil })
	state, memory := files(t)
	_, err := request(ctx(t), sock, []*os.File{state, memory}, Request{Op: OpWorkingSet})
	var ce *Error
	if !errors.As(err, &ce) || ce.Code != CodeBadRequest || called.Load() {
		t.Fatalf("a working set request with files: %v (handler called: %v)", err, called.Load())
	}
}

// A spec's prefetch extents are validated.
func TestSpecPrefetchIsValidated(t *testing.T) {
	s := Spec{Restore: &Restore{Prefetch: []snapshot.Extent{{Off: 4096, Len: 4096}}}}
	if err := s.Validate(); err != nil {
		t.Fatalf("a valid prefetch: %v", err)
	}
	for _, bad := range [][]snapshot.Extent{
		{{Off: 4096, Len: 0}},
		{{Off: 8192, Len: 4096}, {Off: 0, Len: 4096}},
		make([]snapshot.Extent, snapshot.MaxWorkingSetExtents+1),
	} {
		s.Restore.Prefetch = bad
		if err := s.Validate(); err == nil {
			t.Errorf("prefetch %v validated", bad[:min(len(bad), 2)])
		}
	}
}
