#!/usr/bin/env python3
"""What slot compaction would buy: the rollup's set-based UPDATE for 500 records, and a
point SUM(count) read, on records spread over 100 slots (A) against records folded
into 1 slot (B), alternated A B in one run against one throwaway MariaDB.

usage: bench/slot_compaction.py [--records 20000] [--rounds 4]
"""
import argparse, random, time

from throwaway_mariadb import throwaway_mariadb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    with throwaway_mariadb("256M") as db:
        q = db.sql
        q("CREATE DATABASE app; USE app; CREATE TABLE c (record_type INT UNSIGNED NOT NULL, "
          "record_id BIGINT UNSIGNED NOT NULL, slot SMALLINT UNSIGNED NOT NULL, count BIGINT NOT NULL, "
          "PRIMARY KEY (record_type, record_id, slot)); CREATE TABLE o (id BIGINT UNSIGNED PRIMARY KEY, n BIGINT);")
        for rtype, slots in ((1, 100), (2, 1)):
            for base in range(0, a.records, 200):
                rows = ",".join(f"({rtype},{i},{s},1)" for i in range(base, base + 200) for s in range(slots))
                q(f"USE app; INSERT INTO c VALUES {rows};")
        q(f"USE app; INSERT INTO o SELECT seq, 0 FROM seq_0_to_{a.records - 1};")

        def rollup(rtype, ids):
            return (f"UPDATE o JOIN (SELECT record_id, SUM(count) AS total FROM c WHERE record_type = {rtype} "
                    f"AND record_id IN ({','.join(map(str, ids))}) GROUP BY record_id) s ON o.id = s.record_id "
                    "SET o.n = s.total;")

        up, rd = {1: [], 2: []}, {1: [], 2: []}
        for _ in range(a.rounds):
            for rtype in (1, 2):
                sql = "USE app;" + "".join(rollup(rtype, random.sample(range(a.records), 500)) for _ in range(10))
                t0 = time.monotonic()
                q(sql)
                up[rtype].append((time.monotonic() - t0) / 10)
                sql = "USE app;" + "".join(f"SELECT SUM(count) FROM c WHERE record_type = {rtype} AND "
                                           f"record_id = {random.randrange(a.records)};" for _ in range(2000))
                t0 = time.monotonic()
                q(sql)
                rd[rtype].append((time.monotonic() - t0) / 2000)
        print(f"{a.records} records per side; {a.rounds} rounds, A (100 slots) and B (1 slot) alternated")
        print("rollup UPDATE of 500 records: A %.1f ms, B %.1f ms (best), A/B %.1fx"
              % (min(up[1]) * 1e3, min(up[2]) * 1e3, min(up[1]) / min(up[2])))
        print("point SUM(count) read: A %.0f us, B %.0f us (best, one client round trip included), A/B %.1fx"
              % (min(rd[1]) * 1e6, min(rd[2]) * 1e6, min(rd[1]) / min(rd[2])))


if __name__ == "__main__":
    main()
