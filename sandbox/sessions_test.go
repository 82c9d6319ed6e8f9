package sandbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/cell"
)

func TestSessionNormalize(t *testing.T) {
	for _, tc := range []struct {
		in   Session
		want Session
		err  string
	}{
		{Session{}, Session{Language: cell.Python, Context: "default"}, ""},
		{Session{Language: "JS", Context: "work"}, Session{Language: cell.JavaScript, Context: "work"}, ""},
		{Session{Language: "ts"}, Session{Language: cell.TypeScript, Context: "default"}, ""},
		{Session{Language: "sh", Context: "default"}, Session{Language: cell.Bash, Context: "default"}, ""},
		{Session{Language: "cobol"}, Session{}, "python, javascript (js), typescript (ts), bash"},
		{Session{Context: "../etc"}, Session{}, "context name"},
		{Session{Context: strings.Repeat("a", 65)}, Session{}, "context name"},
	} {
		got, err := tc.in.Normalize()
		if tc.err != "" {
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Normalize(%+v) = %v, want ErrInvalid with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Normalize(%+v) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestContextSpecNormalize(t *testing.T) {
	got, err := ContextSpec{Language: "js", Cwd: "/home/user/"}.Normalize()
	if err != nil || got != (ContextSpec{Language: cell.JavaScript, Cwd: "/home/user"}) {
		t.Errorf("Normalize = %+v, %v", got, err)
	}
	for _, bad := range []ContextSpec{
		{Name: "default"}, {Language: "cobol"}, {Name: ".x"}, {Cwd: "relative"}, {Cwd: "/a\x00b"}, {Cwd: "/" + strings.Repeat("a", MaxGuestPathLen)},
	} {
		if _, err := bad.Normalize(); !errors.Is(err, ErrInvalid) {
			t.Errorf("Normalize(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestHasLanguage(t *testing.T) {
	langs := []cell.LanguageInfo{{Name: cell.Python, Version: "3.11.2"}, {Name: cell.Bash, Version: "5.2.15"}}
	if err := HasLanguage("slim", langs, cell.Bash); err != nil {
		t.Error(err)
	}
	err := HasLanguage("slim", langs, cell.JavaScript)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `image "slim" has no javascript; its languages are python, bash`) {
		t.Errorf("javascript on an image without it: %v", err)
	}
	if err := HasLanguage("old", nil, cell.TypeScript); err != nil {
		t.Errorf("an image of unknown languages: %v, want allowed", err)
	}
}
