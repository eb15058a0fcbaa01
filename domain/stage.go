package domain

// Stage is one of the three places a task can be in its life: pending,
// processing, or done (finished and failed together). A store keeps each
// stage apart (the file store as a directory each, the seed's layout), and
// the sweep walks them one at a time.
type Stage uint8

const (
	StagePending Stage = iota
	StageProcessing
	StageDone
)

// Stages lists the stages in the order of the lifecycle. When a task is found
// in two of them after a crash, the later one holds the newer copy.
var Stages = []Stage{StagePending, StageProcessing, StageDone}

// String names the stage as the seeds do: "pending", "processing", "done".
func (s Stage) String() string {
	switch s {
	case StagePending:
		return "pending"
	case StageProcessing:
		return "processing"
	case StageDone:
		return "done"
	}
	return "unknown"
}

// Valid reports whether s is one of the three stages.
func (s Stage) Valid() bool { return s <= StageDone }

// Stage is the stage a task with this status is in.
func (s Status) Stage() Stage {
	switch s {
	case Pending:
		return StagePending
	case Processing:
		return StageProcessing
	}
	return StageDone
}
