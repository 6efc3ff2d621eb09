package wal

// Partition returns the partition Kafka's default partitioner picks for a
// non-null key among numPartitions: murmur2(key) made positive, modulo
// numPartitions. A pipeline moved onto Apache Kafka therefore keeps every
// key in its partition. It panics if numPartitions <= 0.
func Partition(key []byte, numPartitions int32) int32 {
	if numPartitions <= 0 {
		panic("wal: Partition with numPartitions <= 0")
	}
	return int32(murmur2(key)&0x7fffffff) % numPartitions
}

// murmur2 is the 32-bit MurmurHash2 variant of Kafka's Utils.murmur2, with
// its seed.
func murmur2(data []byte) uint32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
		r    = 24
	)
	n := len(data)
	h := uint32(seed) ^ uint32(n)
	i := 0
	for ; i+4 <= n; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch n - i {
	case 3:
		h ^= uint32(data[i+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[i+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[i])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
