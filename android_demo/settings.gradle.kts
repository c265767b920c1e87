// settings.gradle.kts: the demo app's Gradle project (one module, :app); see README.md "The app path".
pluginManagement {
    repositories {
        google()
        mavenCentral()
        gradlePluginPortal()
    }
}
dependencyResolutionManagement {
    repositories {
        google()
        mavenCentral()
    }
}
rootProject.name = "magicselector-demo"
include(":app")
