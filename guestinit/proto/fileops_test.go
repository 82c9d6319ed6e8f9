package proto

import (
	"strings"
	"testing"
)

func TestFileOpValidate(t *testing.T) {
	good := []FileOp{
		{Kind: FileList, Path: "/a", Depth: MaxListDepth},
		{Kind: FileStat, Path: "/a", Root: true},
		{Kind: FileMove, Path: "/a", To: "/b"},
		{Kind: FileWatch, Path: "/a", Recursive: true},
		{Kind: FileDial, Port: 65535},
	}
	for _, op := range good {
		r := Request{Op: OpFile, File: &op}
		if err := r.Validate(); err != nil {
			t.Errorf("%+v: %v", op, err)
		}
	}
	bad := []FileOp{
		{Kind: "chmod", Path: "/a"},
		{Kind: FileList, Path: "a"},
		{Kind: FileList, Path: "/a/../b"},
		{Kind: FileList, Path: "/a", Depth: MaxListDepth + 1},
		{Kind: FileStat, Path: "/a", Depth: 2},
		{Kind: FileMove, Path: "/a"},
		{Kind: FileStat, Path: "/a", To: "/b"},
		{Kind: FileStat, Path: "/a", Recursive: true},
		{Kind: FileDial, Port: 0},
		{Kind: FileDial, Port: 65536},
		{Kind: FileDial, Port: 80, Path: "/a"},
		{Kind: FileStat, Path: "/a", Port: 80},
	}
	for _, op := range bad {
		r := Request{Op: OpFile, File: &op}
		if err := r.Validate(); err == nil {
			t.Errorf("%+v passed", op)
		}
	}
	if err := (&Request{Op: OpFile}).Validate(); err == nil {
		t.Error("op file without file_op passed")
	}
	if err := (&Request{Op: OpHealth, File: &FileOp{Kind: FileStat, Path: "/a"}}).Validate(); err == nil {
		t.Error("health with a file_op passed")
	}
}

// TestFileReplyBounds: what a hostile guest could send in a file answer
// is refused by the host's decoding.
func TestFileReplyBounds(t *testing.T) {
	entry := FileEntry{Name: "f", Path: "/f", Type: "file"}
	ok := Response{Files: &FileReply{Entries: []FileEntry{entry}, Events: []FileEvent{{Name: "x", Op: "create"}}}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]FileReply{
		"type":        {Entries: []FileEntry{{Name: "f", Path: "/f", Type: "weird"}}},
		"size":        {Entry: &FileEntry{Name: "f", Path: "/f", Type: "file", Size: -1}},
		"mode":        {Entry: &FileEntry{Name: "f", Path: "/f", Type: "file", Mode: 0o170000}},
		"path":        {Entry: &FileEntry{Name: "f", Path: "f/../g", Type: "file"}},
		"long name":   {Entry: &FileEntry{Name: strings.Repeat("n", 256), Path: "/f", Type: "file"}},
		"not utf-8":   {Entry: &FileEntry{Name: "\xff", Path: "/f", Type: "file"}},
		"entries":     {Entries: make([]FileEntry, MaxListEntries+1)},
		"events":      {Events: make([]FileEvent, MaxEventBatch+1)},
		"event op":    {Events: []FileEvent{{Name: "x", Op: "explode"}}},
		"event bytes": {Events: []FileEvent{{Name: strings.Repeat("x", MaxPathBytes+1), Op: "write"}}},
	} {
		resp := Response{Files: &r}
		if err := resp.Validate(); err == nil {
			t.Errorf("%s passed", name)
		}
	}
	two := Response{Files: &FileReply{}, Health: &Health{}}
	if err := two.Validate(); err == nil {
		t.Error("a response with files and health passed")
	}
}
