package proto

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestSetEnvValidation(t *testing.T) {
	many := map[string]string{}
	for i := 0; i <= MaxEnvVars; i++ {
		many["V"+strings.Repeat("x", i)] = "1"
	}
	big := map[string]string{}
	for i := 0; i < 9; i++ {
		big["V"+strings.Repeat("x", i)] = strings.Repeat("v", MaxEnvValueBytes)
	}
	bad := map[string]Request{
		"env on another op":  {Op: OpHealth, Env: map[string]string{"A": "1"}},
		"name with a dash":   {Op: OpSetEnv, Env: map[string]string{"A-B": "1"}},
		"name with =":        {Op: OpSetEnv, Env: map[string]string{"A=B": "1"}},
		"leading digit":      {Op: OpSetEnv, Env: map[string]string{"1A": "1"}},
		"empty name":         {Op: OpSetEnv, Env: map[string]string{"": "1"}},
		"long name":          {Op: OpSetEnv, Env: map[string]string{strings.Repeat("A", MaxEnvKeyBytes+1): "1"}},
		"NUL in value":       {Op: OpSetEnv, Env: map[string]string{"A": "x\x00y"}},
		"long value":         {Op: OpSetEnv, Env: map[string]string{"A": strings.Repeat("v", MaxEnvValueBytes+1)}},
		"too many variables": {Op: OpSetEnv, Env: many},
		"too many bytes":     {Op: OpSetEnv, Env: big},
		"code with setenv":   {Op: OpSetEnv, Env: map[string]string{"A": "1"}, Code: "1"},
	}
	for name, r := range bad {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var got Request
		if err := DecodeJSON(b, &got); !errors.Is(err, ErrBadFrame) {
			t.Errorf("%s: DecodeJSON = %v, want ErrBadFrame", name, err)
		}
	}
	var got Request
	if err := DecodeJSON([]byte(`{"op":"setenv","env":{"API_KEY":"s3cret","_x1":"","LANG":"fr_FR.UTF-8 é"}}`), &got); err != nil {
		t.Fatalf("good setenv: %v", err)
	}
	if got.Env["API_KEY"] != "s3cret" || got.Env["LANG"] != "fr_FR.UTF-8 é" || len(got.Env) != 3 {
		t.Errorf("decoded env %v", got.Env)
	}
	if err := DecodeJSON([]byte(`{"op":"setenv","env":{}}`), &got); err != nil {
		t.Errorf("empty setenv (clears the variables): %v", err)
	}
}
