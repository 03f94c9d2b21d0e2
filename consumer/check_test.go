package consumer

// item and decodeItem keep decode_test.go's fuzz test and benchmark
// reading as they did before records became lane.Items: they run the
// consumer's check on one record.
type item struct {
	tenant    string
	value     []byte
	partition int32
	offset    int64
	skip      *skipped
}

type skipped struct{ cause, reason string }

func (c *Consumer) decodeItem(it *item) {
	if s := c.check(it.tenant, it.value); s != nil {
		it.skip = &skipped{cause: s.Cause, reason: s.Reason}
	}
}
