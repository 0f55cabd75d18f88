# A stage that does its work and exits 0 (preprocessing before the training; a generator feeding a pipe).
for i in range(5):
    print("prepared", i)
