-- A pool's rates (domain.Rates) as a JSON object of micros per GPU-,
-- CPU- and GiB-hour and per GiB-month of stored outputs; '': no rates.
ALTER TABLE pools ADD COLUMN rates_json TEXT NOT NULL DEFAULT '';
