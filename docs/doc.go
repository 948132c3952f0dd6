// Package docs holds the project's reference pages, such as reference.md
// (the metrics and the admin API), and the tests that keep them in step with
// the code. It has no code of its own and nothing imports it: its tests read
// the module's Go source as text, so that they need none of the packages they
// describe.
package docs
