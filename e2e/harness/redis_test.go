package harness

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

func redisClient(t *testing.T, r *Redis) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A value written with go-redis reads back.
func TestRedisSmoke(t *testing.T) {
	r := sharedRedis(t)
	c := redisClient(t, r)
	ctx := testCtx(t)
	if err := c.HSet(ctx, "smoke:1", "id", "1", "name", "alpha").Err(); err != nil {
		t.Fatal(err)
	}
	got, err := c.HGet(ctx, "smoke:1", "name").Result()
	if err != nil || got != "alpha" {
		t.Fatalf("HGET = %q, %v; want alpha", got, err)
	}
	cfg, err := c.ConfigGet(ctx, "save").Result()
	if err != nil || cfg["save"] != "" {
		t.Fatalf("CONFIG GET save = %v, %v; want no snapshots", cfg, err)
	}
}

// A restart keeps the address and, without persistence, starts empty.
func TestRedisRestart(t *testing.T) {
	r := sharedRedis(t)
	if err := redisClient(t, r).Set(testCtx(t), "restart", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	empty := func(t *testing.T) {
		err := redisClient(t, r).Get(testCtx(t), "restart").Err()
		if !errors.Is(err, redis.Nil) {
			t.Fatalf("GET after restart: %v, want redis.Nil (no persistence)", err)
		}
	}
	checkRestart(t, r.Server, r.Addr, empty)
	checkKill(t, r.Server, r.Addr, empty)
}
