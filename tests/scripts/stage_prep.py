# A stage that does its work and exits 0 (preprocessing before the training; a generator feeding a pipe).
for i in range(5):
    print("prepared", i)
__import__("time").sleep(0.5)  # a real stage takes a while: long enough to be seen on a loaded machine
