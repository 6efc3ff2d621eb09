package harness_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/e2e/harness"
)

func ExampleStartRedis() {
	ctx := context.Background()
	r, err := harness.StartRedis(ctx, harness.RedisOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()

	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer c.Close()
	fmt.Println(c.Ping(ctx).Val())
	// Output: PONG
}
