import collections, atexit, os, time
totals = collections.Counter()
def pytest_configure(config):
    import jax.monitoring as m
    def listen(event, duration, **kw):
        totals[event] += duration
    m.register_event_duration_secs_listener(listen)
    start = time.process_time()
    def dump():
        with open(f"/tmp/jaxtime_{os.getpid()}.txt", "w") as f:
            f.write(f"process_time {time.process_time()-start:.1f}\n")
            for k, v in totals.most_common(12): f.write(f"{v:8.1f} {k}\n")
    atexit.register(dump)
