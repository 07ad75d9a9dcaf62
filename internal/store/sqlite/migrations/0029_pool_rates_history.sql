-- Every change of a pool's rates: rates_json (as pools.rates_json) is in
-- force from effective_from (Unix nanoseconds) until the pool's next
-- entry, so that history is priced at the rates of its time, whatever
-- the rates are now. A pool from before this table starts with its
-- current rates, in force since the epoch.
CREATE TABLE pool_rates (
    pool           TEXT NOT NULL,
    effective_from INTEGER NOT NULL,
    rates_json     TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (pool, effective_from)
);
INSERT INTO pool_rates (pool, effective_from, rates_json) SELECT name, 0, rates_json FROM pools;
