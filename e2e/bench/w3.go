package main

import "context"

func (b *bench) w3(ctx context.Context) error {
	b.rep.NotRun = append(b.rep.NotRun, "W3: not built")
	return nil
}
