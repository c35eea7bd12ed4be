def main():
    import loupe.coordinator

    print("ok", loupe.coordinator.__file__)
