// Package convstore keeps `cellvm chat --conversation ID` conversations
// between invocations: which daemon sandbox holds the conversation's
// interpreter, and the history the model has seen, one small JSON file per
// conversation under the user's state directory. Files are written to a
// temporary name and renamed, so an interrupted save never leaves half a
// conversation.
package convstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/cellvm/cellvm/agent"
)

// MaxFileBytes bounds a conversation file; history with many images grows.
const MaxFileBytes = 64 << 20

// Conversation is what is kept of one conversation.
type Conversation struct {
	ID        string          `json:"id"`
	SandboxID string          `json:"sandbox_id"`
	Provider  string          `json:"provider"`
	Model     string          `json:"model"`
	Messages  []agent.Message `json:"messages"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// Store is a directory of conversation files.
type Store struct{ Dir string }

// DefaultDir is $CELLVM_STATE_DIR/conversations, else
// $XDG_STATE_HOME/cellvm/conversations, else
// ~/.local/state/cellvm/conversations.
func DefaultDir() (string, error) {
	if d := os.Getenv("CELLVM_STATE_DIR"); d != "" {
		return filepath.Join(d, "conversations"), nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "cellvm", "conversations"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find the state directory: %w", err)
	}
	return filepath.Join(home, ".local", "state", "cellvm", "conversations"), nil
}

// ValidID checks a conversation id: 1 to 64 of [A-Za-z0-9._-], not
// starting with a dot, so it is a safe file name.
func ValidID(id string) error {
	if id == "" || len(id) > 64 || id[0] == '.' {
		return fmt.Errorf("conversation id %q: want 1 to 64 of A-Z a-z 0-9 . _ -, not starting with a dot", id)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("conversation id %q: want 1 to 64 of A-Z a-z 0-9 . _ -, not starting with a dot", id)
		}
	}
	return nil
}

func (s Store) path(id string) string { return filepath.Join(s.Dir, id+".json") }

// Load reads a conversation; found is false when there is none yet.
func (s Store) Load(id string) (c Conversation, found bool, err error) {
	if err := ValidID(id); err != nil {
		return c, false, err
	}
	f, err := os.Open(s.path(id))
	if errors.Is(err, os.ErrNotExist) {
		return Conversation{ID: id}, false, nil
	}
	if err != nil {
		return c, false, fmt.Errorf("open conversation: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return c, false, fmt.Errorf("read conversation: %w", err)
	}
	if len(data) > MaxFileBytes {
		return c, false, fmt.Errorf("conversation file %s is larger than %d bytes", s.path(id), MaxFileBytes)
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, false, fmt.Errorf("conversation file %s: %w", s.path(id), err)
	}
	c.ID = id
	return c, true, nil
}

// Save writes a conversation (mode 0600: it may hold data and results).
func (s Store) Save(c Conversation) error {
	if err := ValidID(c.ID); err != nil {
		return err
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	c.UpdatedAt = time.Now().UTC()
	data, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode conversation: %w", err)
	}
	tmp, err := os.CreateTemp(s.Dir, "."+c.ID+".*.tmp")
	if err != nil {
		return fmt.Errorf("save conversation: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("save conversation: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save conversation: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.path(c.ID)); err != nil {
		return fmt.Errorf("save conversation: %w", err)
	}
	return nil
}
