package nftables

// The lexer of `nft list ruleset` text: tokens, one at a time, from a position in the source.

type tokKind uint8

const (
	tkEOF     tokKind = iota
	tkNewline         // one or more line ends (with the blanks between them)
	tkWord            // names, numbers, addresses, keywords, operators: anything up to a blank or delimiter
	tkString          // "…": text is what is between the quotes
	tkLBrace
	tkRBrace
	tkLParen
	tkRParen
	tkComma
	tkSemicolon
	tkComment // from # to the end of the line: text is what follows the #
)

type token struct {
	kind     tokKind
	text     string
	pos, end int // byte offsets of the token in the source
}

func (t token) is(word string) bool { return t.kind == tkWord && t.text == word }

// endsLine says whether t ends a rule (nft prints one rule a line; a comment is its "# handle N").
func (t token) endsLine() bool {
	return t.kind == tkEOF || t.kind == tkNewline || t.kind == tkComment
}

// scan reads the token at pos. nft separates words with blanks and prints operators as words of their own
// (" . ", " : ", " | ", " == "), so a word runs to the next blank or delimiter; a word may hold '.', ':', '/'
// and '-' (addresses, prefixes, ranges, chain names).
func scan(src string, pos int) token {
	for pos < len(src) && (src[pos] == ' ' || src[pos] == '\t' || src[pos] == '\r') {
		pos++
	}
	if pos >= len(src) {
		return token{kind: tkEOF, pos: pos, end: pos}
	}
	single := func(k tokKind) token { return token{kind: k, text: src[pos : pos+1], pos: pos, end: pos + 1} }
	switch src[pos] {
	case '\n':
		end := pos + 1
		for end < len(src) && (src[end] == '\n' || src[end] == ' ' || src[end] == '\t' || src[end] == '\r') {
			end++
		}
		return token{kind: tkNewline, pos: pos, end: end}
	case '{':
		return single(tkLBrace)
	case '}':
		return single(tkRBrace)
	case '(':
		return single(tkLParen)
	case ')':
		return single(tkRParen)
	case ',':
		return single(tkComma)
	case ';':
		return single(tkSemicolon)
	case '"':
		// nft prints strings without escapes; a string never spans lines.
		end := pos + 1
		for end < len(src) && src[end] != '"' && src[end] != '\n' {
			end++
		}
		t := token{kind: tkString, text: src[pos+1 : end], pos: pos, end: end}
		if end < len(src) && src[end] == '"' {
			t.end++
		}
		return t
	case '#':
		end := pos + 1
		for end < len(src) && src[end] != '\n' {
			end++
		}
		return token{kind: tkComment, text: src[pos+1 : end], pos: pos, end: end}
	}
	end := pos
	for end < len(src) {
		c := src[end]
		if c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '{' || c == '}' || c == '(' || c == ')' ||
			c == ';' || c == '"' || c == '#' {
			break
		}
		// A raw payload expression (@nh,16,16) is one word; elsewhere a comma separates.
		if c == ',' && !(src[pos] == '@' && end+1 < len(src) && isDigit(src[end+1])) {
			break
		}
		end++
	}
	return token{kind: tkWord, text: src[pos:end], pos: pos, end: end}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
