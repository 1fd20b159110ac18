-- uuid_v7 as first defined set no RFC 9562 variant: PostgreSQL gives | and << the same
-- precedence, left to right, so the variant bit was shifted out with the sequence
-- and every id made in SQL had variant 00 (ids made in Go were right). The
-- parentheses fix it. Order is unaffected: the leading 48 bits are still the
-- milliseconds, then the sub-millisecond fraction and the batch sequence.
CREATE OR REPLACE FUNCTION {{schema}}.uuid_v7(ts timestamptz DEFAULT clock_timestamp(), seq bigint DEFAULT NULL)
RETURNS uuid LANGUAGE plpgsql VOLATILE PARALLEL SAFE AS $$
DECLARE
  us bigint := (extract(epoch FROM ts) * 1000000)::bigint;
BEGIN
  RETURN (lpad(to_hex(((us / 1000) << 16) | 28672 | ((us % 1000) * 4096 / 1000)), 16, '0')
       || lpad(to_hex((-9223372036854775807 - 1)
                      | ((coalesce(seq, (random() * 16777215)::bigint) & 16777215) << 38)
                      | (random() * 274877906943)::bigint), 16, '0'))::uuid;
END
$$;
