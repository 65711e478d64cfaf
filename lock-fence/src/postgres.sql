-- distlock fenced writes: schema version 1.
-- Safe to run again: every statement is idempotent.

-- The highest fencing token each resource has admitted.
CREATE TABLE IF NOT EXISTS distlock_fence (
    resource    text        PRIMARY KEY,
    token       bigint      NOT NULL CHECK (token >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Idempotency keys of admitted writes, with the token that first wrote them.
CREATE TABLE IF NOT EXISTS distlock_fence_writes (
    resource        text        NOT NULL,
    idempotency_key text        NOT NULL,
    token           bigint      NOT NULL,
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (resource, idempotency_key)
);

-- Admits a write to p_resource under p_token, inside the caller's transaction.
-- Raises SQLSTATE DL001 (the transaction fails) when the resource already
-- admitted a newer token; DETAIL ends with that newer token.
-- Returns NULL when the write is admitted and must be performed, or the token
-- of the first admission when p_key was recorded before (skip the write).
CREATE OR REPLACE FUNCTION distlock_fence_admit(p_resource text, p_token bigint, p_key text)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    newer bigint;
    first_token bigint;
BEGIN
    -- One statement checks and records: the conflicting row is locked until
    -- the end of the transaction whether or not it is updated, so two holders
    -- are serialized and neither can slip between a check and a write.
    INSERT INTO distlock_fence AS f (resource, token)
    VALUES (p_resource, p_token)
    ON CONFLICT (resource) DO UPDATE
        SET token = EXCLUDED.token, updated_at = now()
        WHERE f.token <= EXCLUDED.token;
    IF NOT FOUND THEN
        SELECT f.token INTO newer FROM distlock_fence AS f WHERE f.resource = p_resource;
        RAISE EXCEPTION USING
            ERRCODE = 'DL001',
            MESSAGE = format('stale fencing token %s for resource %L', p_token, p_resource),
            DETAIL = format('the resource already admitted token %s', newer),
            HINT = 'a newer lock holder wrote to this resource: this holder lost its lock';
    END IF;
    IF p_key IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO distlock_fence_writes (resource, idempotency_key, token)
    VALUES (p_resource, p_key, p_token)
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        RETURN NULL;
    END IF;
    SELECT w.token INTO first_token FROM distlock_fence_writes AS w
    WHERE w.resource = p_resource AND w.idempotency_key = p_key;
    RETURN first_token;
END
$$;
