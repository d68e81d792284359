package client

import (
	"context"
	"fmt"
)

// allPages calls page with each page token of a paged listing, "" first,
// then every next_page_token it answers, until it answers none
// (docs/design/protocol.md, "Paging"). Tokens are keys, not server state,
// so each page may come from another manager. A manager that answers the
// token it was given, or an empty page with a token, would loop forever:
// that is an error naming the method.
func allPages(ctx context.Context, method string, page func(ctx context.Context, token string) (next string, n int, err error)) error {
	token := ""
	for {
		next, n, err := page(ctx, token)
		if err != nil {
			return err
		}
		if next == "" {
			return nil
		}
		if next == token || n == 0 {
			return fmt.Errorf("%s: the manager answered page token %q again (%d entries); stopped paging", method, next, n)
		}
		token = next
	}
}
