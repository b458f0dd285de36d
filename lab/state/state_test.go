package state

import (
	"errors"
	"sync"
	"testing"

	"github.com/k8sguide/k8sguide/lab"
)

func TestCreateTwiceAndLocking(t *testing.T) {
	s := Store{Root: t.TempDir()}
	h, err := s.Create("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create("a"); !errors.Is(err, ErrExists) {
		t.Fatalf("second create: %v", err)
	}
	if err := h.Save(&Lab{Phase: Ready}); err != nil {
		t.Fatal(err)
	}
	h.Close()

	// Concurrent writers serialise: every increment survives.
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := s.Lock("a")
			if err != nil {
				t.Error(err)
				return
			}
			defer h.Close()
			l, err := h.Load()
			if err != nil {
				t.Error(err)
				return
			}
			l.Namespaces = append(l.Namespaces, "x")
			if err := h.Save(l); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	l, err := s.Read("a")
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Namespaces) != 20 || l.Generation != 21 {
		t.Fatalf("after 20 locked updates: %d namespaces, generation %d", len(l.Namespaces), l.Generation)
	}

	h, _ = s.Lock("a")
	if err := h.Remove(); err != nil {
		t.Fatal(err)
	}
	var nf *lab.NotFoundError
	if _, err := s.Lock("a"); !errors.As(err, &nf) {
		t.Fatalf("lock of removed lab: %v", err)
	}
	if _, err := s.Read("a"); !errors.As(err, &nf) {
		t.Fatalf("read of removed lab: %v", err)
	}
}

// View decodes a state once while the file stays the same, and sees every save.
func TestViewFollowsSaves(t *testing.T) {
	s := Store{Root: t.TempDir()}
	h, err := s.Create("v")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Save(&Lab{Phase: Creating}); err != nil {
		t.Fatal(err)
	}
	a, err := s.View("v")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.View("v")
	if a != b || a.Phase != Creating {
		t.Fatalf("unchanged file decoded again (%p, %p) or wrong phase %q", a, b, a.Phase)
	}
	for i := 0; i < 3; i++ {
		if err := h.Save(&Lab{Phase: Ready, Namespaces: make([]string, i)}); err != nil {
			t.Fatal(err)
		}
		c, err := s.View("v")
		if err != nil {
			t.Fatal(err)
		}
		if c.Phase != Ready || len(c.Namespaces) != i {
			t.Fatalf("save %d not seen: phase %q, %d namespaces", i, c.Phase, len(c.Namespaces))
		}
	}
}
