package postgres

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// A batch's columns (rows.go) go to the database as one array parameter
// each, and a batch of a few dozen changes sends tens of kilobytes of
// them. Given as Go slices, pgx encodes every element through an any (an
// allocation per string) into a buffer it grows by a quarter at a time
// and drops after each statement, which was a third of what the server
// allocated per task. The columns are written instead straight into
// PostgreSQL's binary array format, in buffers a batch reuses, and pgx
// copies each in one append: the array types below, with the codec that
// hands them over, registered on each of the pool's connections.

// array is a one-dimensional array in PostgreSQL's binary format, without
// its header (encoded writes it): each element its length and bytes, or
// a length of -1 for NULL.
type array struct {
	n     int
	nulls bool
	body  []byte
}

func (a *array) reset() { a.n, a.nulls, a.body = 0, false, a.body[:0] }

func (a *array) null() {
	a.n++
	a.nulls = true
	a.body = binary.BigEndian.AppendUint32(a.body, math.MaxUint32) // -1
}

func (a *array) value(b []byte) {
	a.n++
	a.body = binary.BigEndian.AppendUint32(a.body, uint32(len(b)))
	a.body = append(a.body, b...)
}

// appendTo appends the array with the header that says its element type.
func (a *array) appendTo(buf []byte, elem uint32) []byte {
	ndim := uint32(1)
	if a.n == 0 {
		ndim = 0 // PostgreSQL's empty array has no dimensions
	}
	flags := uint32(0)
	if a.nulls {
		flags = 1
	}
	buf = binary.BigEndian.AppendUint32(buf, ndim)
	buf = binary.BigEndian.AppendUint32(buf, flags)
	buf = binary.BigEndian.AppendUint32(buf, elem)
	if a.n > 0 {
		buf = binary.BigEndian.AppendUint32(buf, uint32(a.n))
		buf = binary.BigEndian.AppendUint32(buf, 1) // the lower bound
	}
	return append(buf, a.body...)
}

// texts is a text[] parameter.
type texts struct{ array }

func (a *texts) add(s string) {
	a.n++
	a.body = binary.BigEndian.AppendUint32(a.body, uint32(len(s)))
	a.body = append(a.body, s...)
}

// addOrNull adds *s, or NULL for nil.
func (a *texts) addOrNull(s *string) {
	if s == nil {
		a.null()
		return
	}
	a.add(*s)
}

// byteas is a bytea[] parameter; a nil element is NULL.
type byteas struct{ array }

func (a *byteas) add(b []byte) {
	if b == nil {
		a.null()
		return
	}
	a.value(b)
}

// addAppended adds the element that appendElem appends to a buffer,
// written in place.
func (a *byteas) addAppended(appendElem func([]byte) []byte) {
	at := len(a.body)
	a.body = append(a.body, 0, 0, 0, 0)
	a.body = appendElem(a.body)
	binary.BigEndian.PutUint32(a.body[at:], uint32(len(a.body)-at-4))
	a.n++
}

// int8s is an int8[] parameter.
type int8s struct{ array }

func (a *int8s) add(v int64) {
	a.n++
	a.body = binary.BigEndian.AppendUint32(a.body, 8)
	a.body = binary.BigEndian.AppendUint64(a.body, uint64(v))
}

// addOrNull adds *v, or NULL for nil.
func (a *int8s) addOrNull(v *int64) {
	if v == nil {
		a.null()
		return
	}
	a.add(*v)
}

// int2s is an int2[] parameter.
type int2s struct{ array }

func (a *int2s) add(v int16) {
	a.n++
	a.body = binary.BigEndian.AppendUint32(a.body, 2)
	a.body = binary.BigEndian.AppendUint16(a.body, uint16(v))
}

// bools is a bool[] parameter.
type bools struct{ array }

func (a *bools) add(v bool) {
	a.n++
	a.body = binary.BigEndian.AppendUint32(a.body, 1)
	if v {
		a.body = append(a.body, 1)
	} else {
		a.body = append(a.body, 0)
	}
}

// arrayValue is any of the array types above.
type arrayValue interface{ inner() *array }

func (a *array) inner() *array { return a }

// arrayTypes are the array types above by the OID of the parameter type
// each is sent as: its element type's OID, and whether a value is one.
var arrayTypes = map[uint32]struct {
	elem uint32
	is   func(any) bool
}{
	pgtype.TextArrayOID:  {pgtype.TextOID, func(v any) bool { _, ok := v.(*texts); return ok }},
	pgtype.ByteaArrayOID: {pgtype.ByteaOID, func(v any) bool { _, ok := v.(*byteas); return ok }},
	pgtype.Int8ArrayOID:  {pgtype.Int8OID, func(v any) bool { _, ok := v.(*int8s); return ok }},
	pgtype.Int2ArrayOID:  {pgtype.Int2OID, func(v any) bool { _, ok := v.(*int2s); return ok }},
	pgtype.BoolArrayOID:  {pgtype.BoolOID, func(v any) bool { _, ok := v.(*bools); return ok }},
}

// registerArrays has conn's pgx send the array types above as they are,
// each only as the parameter type it is (a texts given for an int8[]
// parameter fails the statement rather than sending text for numbers).
// Every other value of these types is encoded, and every result decoded,
// by pgx's own codecs.
func registerArrays(conn *pgx.Conn) error {
	m := conn.TypeMap()
	for oid, at := range arrayTypes {
		t, ok := m.TypeForOID(oid)
		if !ok {
			return fmt.Errorf("pgx has no type for OID %d", oid)
		}
		m.RegisterType(&pgtype.Type{Name: t.Name, OID: oid, Codec: arrayCodec{Codec: t.Codec, elem: at.elem, is: at.is}})
	}
	return nil
}

// arrayCodec is pgx's codec of an array type, sending one of the array
// types above as it is.
type arrayCodec struct {
	pgtype.Codec
	elem uint32
	is   func(any) bool
}

func (c arrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.(arrayValue); ok {
		if format == pgtype.BinaryFormatCode && c.is(value) {
			return arrayPlan{elem: c.elem}
		}
		return refusePlan{oid: oid, value: value}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

// arrayPlan sends one of the array types above whose elements are of type
// elem.
type arrayPlan struct{ elem uint32 }

func (p arrayPlan) Encode(value any, buf []byte) ([]byte, error) {
	return value.(arrayValue).inner().appendTo(buf, p.elem), nil
}

// refusePlan is the plan for one of the array types given for a parameter
// of another type (or asked for in text).
type refusePlan struct {
	oid   uint32
	value any
}

func (p refusePlan) Encode(any, []byte) ([]byte, error) {
	return nil, fmt.Errorf("a %T is no parameter of type OID %d", p.value, p.oid)
}
