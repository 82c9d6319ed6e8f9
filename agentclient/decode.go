package agentclient

import (
	"encoding/json"
	"fmt"

	"github.com/cellvm/cellvm/guestinit/proto"
)

// largeMessage is the size past which a message is decoded by
// json.Unmarshal rather than proto.DecodeJSON.
//
// proto.DecodeJSON runs a json.Decoder, which copies its input into a
// buffer it grows by doubling: for a 66 MiB result that is ~256 MiB of
// allocation before a field is decoded. json.Unmarshal decodes the
// message in place: the only copies are the decoded strings. It checks
// the syntax just as strictly and refuses trailing data, but it ignores
// fields it does not know instead of refusing them; an unknown field's
// value is scanned, never kept, so that leniency costs the host nothing.
// Small messages (every one but a large result or event) keep the strict
// decoder.
const largeMessage = proto.MaxFramePayload

// decode decodes and validates one message of the agent.
func decode(p []byte, v proto.Validator) error {
	if len(p) <= largeMessage {
		return proto.DecodeJSON(p, v)
	}
	if err := json.Unmarshal(p, v); err != nil {
		return fmt.Errorf("%w: decode %T: %v", proto.ErrBadFrame, v, err)
	}
	if err := v.Validate(); err != nil {
		return fmt.Errorf("%w: %T: %v", proto.ErrBadFrame, v, err)
	}
	return nil
}
