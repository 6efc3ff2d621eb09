package connect

import (
	"context"
	"fmt"
)

func fmtErrorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
func contextCanceledErr() error                  { return context.Canceled }
