package engine

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/cellvm/cellvm/sandbox"
)

// TestForkTakesItsNetwork: a fork of a snapshot whose machine has a NIC
// gets the request's policy, or else its parent's, and keeps the NIC's MAC;
// a fork cannot drop that NIC (an empty policy) nor gain one the snapshot
// lacks, and a snapshot with a NIC but no MAC recorded is refused. None
// of this starts anything: forkConfig only decides.
func TestForkTakesItsNetwork(t *testing.T) {
	m, _, _ := newHostileManager(t, nil)
	write := func(meta snapshotMeta) {
		t.Helper()
		b, err := json.Marshal(meta)
		if err != nil {
			t.Fatal(err)
		}
		dir := m.snapshotDir(meta.Info.ID)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, snapMetaFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const netted, plain, nomac = "snap-0000000000a1", "snap-0000000000a2", "snap-0000000000a3"
	parentPolicy := &sandbox.NetworkPolicy{Allow: []string{"pypi.org"}}
	shape := sandbox.Config{VCPUs: 1, MemoryMiB: 512}
	withNet := shape
	withNet.Network = parentPolicy
	write(snapshotMeta{Info: sandbox.SnapshotInfo{ID: netted, VCPUs: 1, MemoryMiB: 512}, Config: withNet, Network: true, MAC: "02:c7:0a:4d:00:06"})
	write(snapshotMeta{Info: sandbox.SnapshotInfo{ID: plain, VCPUs: 1, MemoryMiB: 512}, Config: shape})
	write(snapshotMeta{Info: sandbox.SnapshotInfo{ID: nomac, VCPUs: 1, MemoryMiB: 512}, Config: withNet, Network: true})

	cfg, meta, err := m.forkConfig(sandbox.Config{Snapshot: netted})
	if err != nil {
		t.Fatalf("fork of a networked snapshot with no policy of its own: %v", err)
	}
	if !reflect.DeepEqual(cfg.Network, parentPolicy) || meta.MAC != "02:c7:0a:4d:00:06" {
		t.Errorf("fork without a policy: network %+v (want the parent's %+v), MAC %q", cfg.Network, parentPolicy, meta.MAC)
	}
	own := &sandbox.NetworkPolicy{Allow: []string{"example.com"}}
	if cfg, _, err = m.forkConfig(sandbox.Config{Snapshot: netted, Network: own}); err != nil || !reflect.DeepEqual(cfg.Network, own) {
		t.Errorf("fork with its own policy: %+v %v, want %+v", cfg.Network, err, own)
	}
	for _, c := range []struct {
		name string
		cfg  sandbox.Config
		want error
	}{
		{"an empty policy for a NIC", sandbox.Config{Snapshot: netted, Network: &sandbox.NetworkPolicy{}}, sandbox.ErrInvalid},
		{"a policy for a machine without a NIC", sandbox.Config{Snapshot: plain, Network: own}, sandbox.ErrInvalid},
		{"a NIC without a recorded MAC", sandbox.Config{Snapshot: nomac}, sandbox.ErrNotSupported},
	} {
		if _, _, err := m.forkConfig(c.cfg); !errors.Is(err, c.want) {
			t.Errorf("fork with %s: %v, want %v", c.name, err, c.want)
		}
	}
	if cfg, _, err := m.forkConfig(sandbox.Config{Snapshot: plain}); err != nil || cfg.Network != nil {
		t.Errorf("fork of a snapshot without network: %+v %v", cfg.Network, err)
	}
}
