package domain

// What every store checks before it stores a record, so that the stores
// cannot drift apart: a new task's names (they become keys, and in the file
// store paths), a change's legality (CheckTransition), and that the record
// reads back from its stored form (or the next start-up would call it
// corrupt). readBack (readback.go) turns the stored form back into the
// record a restart would load.

// VetNew checks a task for Create and returns the record to keep with its
// stored form.
func VetNew(t Task) (Task, []byte, error) {
	switch {
	case !ValidHost(t.Host):
		return Task{}, nil, E(KindInvalid, CodeInvalidTask, "bad host name %q", t.Host)
	case !ValidName(t.Queue):
		return Task{}, nil, E(KindInvalid, CodeInvalidTask, "bad queue name %q", t.Queue)
	case !ValidID(t.ID):
		return Task{}, nil, E(KindInvalid, CodeInvalidTask, "bad task id %q", t.ID)
	}
	data := EncodeTask(t)
	stored, err := readBack(t, data)
	if err != nil {
		return Task{}, nil, &Error{Kind: KindInvalid, Code: CodeInvalidTask, Message: "record does not hold together", Err: err}
	}
	return stored, data, nil
}

// VetBatch checks the tasks of a batch for CreateAll: each as VetNew does,
// and all of one queue. It returns the records to keep with their stored
// forms.
func VetBatch(ts []Task) ([]Task, [][]byte, error) {
	stored, data := make([]Task, len(ts)), make([][]byte, len(ts))
	for i, t := range ts {
		if KeyOf(t).Ref() != KeyOf(ts[0]).Ref() {
			return nil, nil, E(KindInvalid, CodeInvalidTask, "a batch's tasks are of one queue")
		}
		var err error
		if stored[i], data[i], err = VetNew(t); err != nil {
			return nil, nil, err
		}
	}
	return stored, data, nil
}

// VetChange checks what an update left in place of cur: a legal move of
// the state machine (which keeps the task's identity), and a record that
// reads back. It returns the record to keep with its stored form.
func VetChange(cur, next Task) (Task, []byte, error) {
	if err := CheckTransition(cur, next); err != nil {
		return Task{}, nil, err
	}
	data := EncodeTask(next)
	stored, err := readBack(next, data)
	if err != nil {
		return Task{}, nil, &Error{Kind: KindInternal, Code: CodeInvalidTask, Message: "update left a record that does not hold together", Err: err}
	}
	return stored, data, nil
}
