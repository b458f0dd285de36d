package lab

import (
	"fmt"
	"strings"
)

// Errors as the CLI prints them: one line.

// FirstLine is the first non-blank line of a tool's message, trimmed: errors are one line.
func FirstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}

// NotFoundError says that a named lab or node does not exist.
type NotFoundError struct {
	Kind, Name string
	Known      []string
	// Suggest is the known name the user probably meant ("" when none is close).
	Suggest string
}

func (e *NotFoundError) Error() string {
	switch {
	case len(e.Known) == 0:
		return fmt.Sprintf("no %s named %q", e.Kind, e.Name)
	case e.Suggest != "":
		return fmt.Sprintf("no %s named %q (did you mean %q? known: %v)", e.Kind, e.Name, e.Suggest, e.Known)
	}
	return fmt.Sprintf("no %s named %q (known: %v)", e.Kind, e.Name, e.Known)
}
