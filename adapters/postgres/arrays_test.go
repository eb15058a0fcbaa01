package postgres

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// Each array type reaches the database as the array it holds, NULLs and
// the empty array included, through the pool's own connections.
func TestArraysReachTheDatabaseAsTheyAre(t *testing.T) {
	s, err := Open(context.Background(), pgtest.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()

	var ts texts
	for _, v := range []string{"a", "", "é ü", "x,y{}\"\\"} {
		ts.add(v)
	}
	ts.null()
	var bs byteas
	bs.add([]byte{0, 1, 255})
	bs.add(nil)
	bs.add([]byte{})
	bs.addAppended(func(b []byte) []byte { return append(b, "appended"...) })
	var i8 int8s
	i8.add(-1 << 62)
	i8.addOrNull(nil)
	i8.add(7)
	var i2 int2s
	i2.add(-32768)
	i2.add(12)
	var bo bools
	bo.add(true)
	bo.add(false)
	var empty texts

	var gotTexts []*string
	var gotBytes [][]byte
	var gotInt8 []*int64
	var gotInt2 []int16
	var gotBools []bool
	var gotEmpty []string
	var emptyLen *int
	if err := s.pool.QueryRow(ctx, `SELECT $1::text[], $2::bytea[], $3::int8[], $4::int2[], $5::bool[], $6::text[], array_length($6::text[], 1)`,
		&ts, &bs, &i8, &i2, &bo, &empty).Scan(&gotTexts, &gotBytes, &gotInt8, &gotInt2, &gotBools, &gotEmpty, &emptyLen); err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, p := range gotTexts {
		if p == nil {
			texts = append(texts, "<NULL>")
		} else {
			texts = append(texts, *p)
		}
	}
	if want := []string{"a", "", "é ü", "x,y{}\"\\", "<NULL>"}; !slices.Equal(texts, want) {
		t.Errorf("text[] = %q, want %q", texts, want)
	}
	if len(gotBytes) != 4 || string(gotBytes[0]) != "\x00\x01\xff" || gotBytes[1] != nil || gotBytes[2] == nil || len(gotBytes[2]) != 0 || string(gotBytes[3]) != "appended" {
		t.Errorf("bytea[] = %q, want [00 01 ff], NULL, empty, appended", gotBytes)
	}
	if len(gotInt8) != 3 || *gotInt8[0] != -1<<62 || gotInt8[1] != nil || *gotInt8[2] != 7 {
		t.Errorf("int8[] = %v, want [-2^62 NULL 7]", gotInt8)
	}
	if !slices.Equal(gotInt2, []int16{-32768, 12}) || !slices.Equal(gotBools, []bool{true, false}) {
		t.Errorf("int2[] = %v, bool[] = %v", gotInt2, gotBools)
	}
	if gotEmpty == nil || len(gotEmpty) != 0 || emptyLen != nil {
		t.Errorf("the empty text[] came back as %q with length %v, want PostgreSQL's empty array", gotEmpty, emptyLen)
	}

	// Reset, an array is empty again and reused.
	ts.reset()
	ts.add("again")
	var again []string
	if err := s.pool.QueryRow(ctx, `SELECT $1::text[]`, &ts).Scan(&again); err != nil || !slices.Equal(again, []string{"again"}) {
		t.Errorf("after reset: %q, %v", again, err)
	}

	// Slices still go through pgx's own codecs.
	var plain []string
	if err := s.pool.QueryRow(ctx, `SELECT $1::text[]`, []string{"p", "q"}).Scan(&plain); err != nil || !slices.Equal(plain, []string{"p", "q"}) {
		t.Errorf("a []string: %q, %v", plain, err)
	}
}

// An array type given for a parameter of another type fails the statement
// rather than sending its bytes as that type.
func TestArrayOfTheWrongTypeIsRefused(t *testing.T) {
	s, err := Open(context.Background(), pgtest.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ts texts
	ts.add("12345678")
	var got []int64
	err = s.pool.QueryRow(context.Background(), `SELECT $1::int8[]`, &ts).Scan(&got)
	if err == nil || !strings.Contains(err.Error(), "no parameter of type") {
		t.Fatalf("texts as int8[]: got %v, %v; want the refusal", got, err)
	}
}
