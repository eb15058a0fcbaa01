package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// DecodeTask rebuilds a task from its stored bytes. It is the one way back
// from storage: it rejects a record that does not hold together (so the store
// can move it to corrupt/) and normalises JSON nulls to empty values.
func DecodeTask(data []byte) (Task, error) {
	var t Task
	// json.Unmarshal accepts exactly one JSON value (and white space), as
	// the decoder below does, at a third less cost: start-up decodes every
	// task file. The decoder only says why a record is refused.
	if json.Unmarshal(data, &t) != nil {
		return Task{}, decodeError(data)
	}
	t.Item = nonNull(t.Item)
	t.Progress = nonNull(t.Progress)
	t.Result = nonNull(t.Result)
	t.Failure = nonNull(t.Failure)
	if err := CheckRecord(t); err != nil {
		return Task{}, err
	}
	return t, nil
}

// CheckRecord is what a record must be beyond valid JSON, for DecodeTask to
// accept it (and so for a restart to load it rather than call it corrupt).
func CheckRecord(t Task) error {
	switch {
	case !ValidID(t.ID):
		return fmt.Errorf("decode task: bad id %q", t.ID)
	case !t.Status.Valid():
		return fmt.Errorf("decode task %s: bad status %q", t.ID, t.Status)
	case t.Status == Processing && t.Lease == nil:
		return fmt.Errorf("decode task %s: processing without a lease", t.ID)
	case t.Status.Terminal() && t.FinishedAt == nil:
		return fmt.Errorf("decode task %s: terminal without finishedAt", t.ID)
	case t.Attempts < 0:
		return fmt.Errorf("decode task %s: negative attempts", t.ID)
	}
	return nil
}

// decodeError is why data, which json.Unmarshal refused, is not a record.
func decodeError(data []byte) error {
	var t Task
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&t); err != nil {
		return fmt.Errorf("decode task: %w", err)
	}
	// More() says false before a stray '}' or ']', so ask for the next token:
	// anything but the end means a torn or doubled write.
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("decode task: trailing data")
	}
	// Unreachable while both accept the same inputs; say so rather than
	// let a refused record through.
	return fmt.Errorf("decode task: not a single JSON object")
}

// EncodeTask is the stored form of t: one JSON object and a newline.
func EncodeTask(t Task) []byte {
	b, err := json.Marshal(t)
	if err != nil {
		// Every field is a plain value or already-valid raw JSON.
		panic(fmt.Sprintf("encode task %s: %v", t.ID, err))
	}
	return append(b, '\n')
}

// IsNull reports whether raw is absent or the JSON literal null.
func IsNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

func nonNull(raw json.RawMessage) json.RawMessage {
	if IsNull(raw) {
		return nil
	}
	return raw
}
