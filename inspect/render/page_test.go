package render

import (
	"fmt"
	"regexp"
	"testing"
)

// TestPicturesAtOneScale: every page draws its pictures at one scale, pictureScale px per point, whatever their
// size, so that compare's pictures of three dataplanes show a box at the same size in each (each had been shrunk
// to the page's width by its own factor).
func TestPicturesAtOneScale(t *testing.T) {
	sized := regexp.MustCompile(`<svg width="(\d+)px" height="(\d+)px"`)
	for _, pt := range [][2]int{{1744, 514}, {1271, 728}, {300, 120}} {
		svg := fmt.Sprintf(`<?xml version="1.0"?>
<!DOCTYPE svg>
<svg width="%dpt" height="%dpt" viewBox="0.00 0.00 %d.00 %d.00" xmlns="http://www.w3.org/2000/svg"></svg>`, pt[0], pt[1], pt[0], pt[1])
		got := string(inlineSVG([]byte(svg)))
		m := sized.FindStringSubmatch(got)
		if m == nil {
			t.Fatalf("%v: no size in px in %q", pt, got)
		}
		var w, h float64
		fmt.Sscan(m[1], &w)
		fmt.Sscan(m[2], &h)
		if wantW, wantH := float64(pt[0])*pictureScale, float64(pt[1])*pictureScale; w < wantW-1 || w > wantW+1 || h < wantH-1 || h > wantH+1 {
			t.Errorf("%v pt drawn at %.0f×%.0f px, want %.0f×%.0f", pt, w, h, wantW, wantH)
		}
		if regexp.MustCompile(`<\?xml|<!DOCTYPE`).MatchString(got) {
			t.Errorf("the prolog is still there: %q", got)
		}
	}
}
