package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestListenUnixSocketIsMode0600WhateverTheUmask(t *testing.T) {
	// Umask is process-wide; this test does not run in parallel.
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := shortTempDir(t)
	sock := filepath.Join(dir, "api.sock")
	ln, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket with 0600", fi.Mode())
	}
	// No temporary directory is left next to it.
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the socket", len(entries))
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after Close: %v", err)
	}
}

func TestListenUnixReplacesOnlyStaleSockets(t *testing.T) {
	dir := shortTempDir(t)
	sock := filepath.Join(dir, "api.sock")

	// A stale socket, as a crashed daemon leaves it.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	ln, err := ListenUnix(sock)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	defer ln.Close()

	// A live one is not taken over.
	if _, err := ListenUnix(sock); err == nil || !strings.Contains(err.Error(), "listening") {
		t.Errorf("over a live socket: %v, want an error", err)
	}
	// And the live one still works.
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("dialing the first listener: %v", err)
	}
	c.Close()

	// A regular file is never removed.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ListenUnix(file); err == nil {
		t.Error("ListenUnix over a regular file succeeded")
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Error("regular file was replaced")
	}
}

func TestListenUnixCloseKeepsAReplacement(t *testing.T) {
	dir := shortTempDir(t)
	sock := filepath.Join(dir, "api.sock")
	ln, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	// Someone else's socket took the name.
	os.Remove(sock)
	other, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ln.Close()
	if _, err := os.Lstat(sock); err != nil {
		t.Errorf("Close removed a socket that was not its own: %v", err)
	}
}

func TestPeerCredRefusesOtherUIDs(t *testing.T) {
	const stranger = 54321
	if os.Getuid() == stranger {
		t.Skip("test uid collides with the excluded uid")
	}
	e := newTestEnvListen(t, []ListenOption{AllowUIDs(stranger)})
	_, err := e.client.List(context.Background())
	if !errors.Is(err, ErrForbidden) {
		t.Fatalf("List from a uid not allowed: %v, want ErrForbidden", err)
	}
	wantClientError(t, "refused peer", err, http.StatusForbidden, CodeForbidden)
	if calls := e.fake.Calls(); len(calls) != 0 {
		t.Errorf("manager reached from a refused peer: %q", calls)
	}
	// The listener keeps serving (refusing) after a refusal.
	_, err = e.client.Get(context.Background(), "x")
	if !errors.Is(err, ErrForbidden) {
		t.Errorf("second request: %v", err)
	}
}

func TestPeerCredAllowsOwnUIDAndRecordsIt(t *testing.T) {
	e := newTestEnvListen(t, []ListenOption{AllowUIDs(os.Getuid())})
	if _, err := e.client.List(context.Background()); err != nil {
		t.Fatalf("own uid refused: %v", err)
	}
	if !strings.Contains(e.log.String(), `"peer_uid":`+strconv.Itoa(os.Getuid())) {
		t.Errorf("log lacks the peer uid: %s", e.log.String())
	}
}
