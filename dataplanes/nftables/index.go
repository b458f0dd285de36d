package nftables

import "strings"

// setIndex finds elements of a big named set without comparing the key with every element: elements whose
// key is exact values (no prefix, no range) are in a hash map; the others are compared one by one.
type setIndex struct {
	types []string
	exact map[string]int // canonical key -> index of the first element with it
	other []int          // elements with a prefix or range in their key, in order
}

// indexable are the datatypes whose literals have one canonical form.
var indexable = map[string]bool{tAddr: true, tProto: true, tPort: true, tMark: true, tInt: true, tIfname: true}

// index returns the set's index, built on first use (walks do not change a ruleset, so it never goes stale;
// a caller that edits Elems afterwards must make a new Set).
func (s *Set) index() *setIndex {
	s.ixOnce.Do(func() { s.ix = buildIndex(s) })
	return s.ix
}

func buildIndex(s *Set) *setIndex {
	ix := &setIndex{types: s.Type, exact: map[string]int{}}
	for _, t := range s.Type {
		if !indexable[t] {
			ix.exact = nil
		}
	}
	for i, el := range s.Elems {
		if ix.exact == nil {
			ix.other = append(ix.other, i)
			continue
		}
		k, ok := canonicalElem(el.Key, s.Type)
		if !ok {
			ix.other = append(ix.other, i)
			continue
		}
		if _, dup := ix.exact[k]; !dup {
			ix.exact[k] = i
		}
	}
	return ix
}

// canonicalElem is the canonical key of an element made of exact values; ok is false otherwise.
func canonicalElem(k *Expr, types []string) (string, bool) {
	if k != nil && k.Kind == KElem && len(k.Args) == 1 {
		k = k.Args[0]
	}
	parts := []*Expr{k}
	if k != nil && k.Kind == KConcat {
		parts = k.Args
	}
	if len(parts) != len(types) {
		return "", false
	}
	var b strings.Builder
	for i, p := range parts {
		if p != nil && p.Kind == KElem && len(p.Args) == 1 {
			p = p.Args[0]
		}
		if p == nil || p.Kind != KString && p.Kind != KNumber {
			return "", false
		}
		v, ok := literal(p, types[i])
		if !ok {
			return "", false
		}
		if i > 0 {
			b.WriteByte(0)
		}
		b.WriteString(v.String())
	}
	return b.String(), true
}

// canonicalKey is the canonical form of known key values of the set's types; ok is false when the index
// cannot be used for them.
func (ix *setIndex) canonicalKey(vs []val) (string, bool) {
	if ix.exact == nil || len(vs) != len(ix.types) {
		return "", false
	}
	var b strings.Builder
	for i, v := range vs {
		if !v.known || v.absent != "" || v.t != ix.types[i] {
			return "", false
		}
		if i > 0 {
			b.WriteByte(0)
		}
		b.WriteString(v.String())
	}
	return b.String(), true
}

// findInSet returns the index of the first element of set that key values vs match (-1 when none); det is
// false when the match rests on values the trace does not know.
func findInSet(set *Set, vs []val) (int, bool) {
	ix := set.index()
	if k, ok := ix.canonicalKey(vs); ok {
		best := -1
		if i, ok := ix.exact[k]; ok {
			best = i
		}
		for _, i := range ix.other {
			if best >= 0 && i > best {
				break
			}
			if m, _ := matchKey(vs, set.Elems[i].Key); m {
				best = i
				break
			}
		}
		return best, true
	}
	first, firstDet := -1, true
	for i, el := range set.Elems {
		m, d := matchKey(vs, el.Key)
		if !m {
			continue
		}
		if d {
			return i, true
		}
		if first < 0 {
			first, firstDet = i, false
		}
	}
	return first, firstDet
}
