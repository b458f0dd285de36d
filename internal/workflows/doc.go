// Package workflows holds the tests of the repository's GitHub Actions workflows (.github/workflows): they are
// linted with actionlint, and the kind workflow is checked to cover every dataplane and every step of the lab.
package workflows
