package domain

// Bounds of each number in a payload (an item, progress, result or
// failure). JSON sets none, but a schema compares numbers exactly (as
// big.Rat), at a cost that grows with a number's size, which any poster
// could otherwise run up (an item of a thousand 1e999999 took 18 s to
// check), and PostgreSQL's numeric holds no more than 131072 digits.
const (
	MaxNumberDigits   = 1000 // digits of the mantissa, before and after the point
	MaxNumberExponent = 1000 // the exponent as written: 1e1000 is the largest power
)

// OversizedNumber returns the first number in doc (JSON, valid) with more
// digits or a larger exponent than the bounds allow, cut to 40 bytes for a
// message; "" if there is none. It reads doc once, outside strings only.
func OversizedNumber(doc []byte) string {
	for i := 0; i < len(doc); i++ {
		switch c := doc[i]; {
		case c == '"':
			for i++; i < len(doc) && doc[i] != '"'; i++ {
				if doc[i] == '\\' {
					i++ // the escaped byte, be it a quote
				}
			}
		case c == '-' || ('0' <= c && c <= '9'):
			start := i
			digits, exponent, inExponent := 0, 0, false
			for ; i < len(doc) && isNumberByte(doc[i]); i++ {
				switch d := doc[i]; {
				case d == 'e' || d == 'E':
					inExponent = true
				case '0' <= d && d <= '9' && inExponent:
					if exponent = exponent*10 + int(d-'0'); exponent > MaxNumberExponent {
						return cut(doc[start:], 40)
					}
				case '0' <= d && d <= '9':
					if digits++; digits > MaxNumberDigits {
						return cut(doc[start:], 40)
					}
				}
			}
			i-- // the loop's i++ steps past the number's last byte
		}
	}
	return ""
}

func isNumberByte(c byte) bool {
	return ('0' <= c && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

func cut(b []byte, n int) string {
	end := 0
	for end < len(b) && end < n && isNumberByte(b[end]) {
		end++
	}
	if end == n {
		return string(b[:end]) + "…"
	}
	return string(b[:end])
}
